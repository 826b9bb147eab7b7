//! CAR's `CostModel`: a model's declared prices, and what one generation costs at them.
//!
//! Prices are USD per 1M tokens for uncached input, output, cache-read input and
//! cache-write input. Every price is nullable and `null` means **unpriced, not free** (CAR's
//! rule): a local model declares none, and [`CostModel::price`] answers `None` for it rather
//! than a fabricated 0. `pricing_tiers` override components by prompt size: the tier with the
//! highest `min_prompt_tokens` not above the prompt wins, and it overrides only the components
//! it declares. Choices where CAR is silent: cache reads without their own rate are priced at
//! the input rate (no discount is assumed), and a local cache write costs nothing (the local
//! engine reports none).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One prompt-size override of [`CostModel`]'s rates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PricingTier {
    pub min_prompt_tokens: u64,
    #[serde(default)]
    pub input_per_mtok: Option<f64>,
    #[serde(default)]
    pub output_per_mtok: Option<f64>,
    #[serde(default)]
    pub cache_read_input_per_mtok: Option<f64>,
    #[serde(default)]
    pub cache_write_input_per_mtok: Option<f64>,
}

/// CAR's `CostModel` (`ModelSchema.cost`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostModel {
    #[serde(default)]
    pub input_per_mtok: Option<f64>,
    #[serde(default)]
    pub output_per_mtok: Option<f64>,
    #[serde(default)]
    pub cache_read_input_per_mtok: Option<f64>,
    #[serde(default)]
    pub cache_write_input_per_mtok: Option<f64>,
    #[serde(
        default,
        deserialize_with = "crate::methods::fields::null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub pricing_tiers: Vec<PricingTier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_mb: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram_mb: Option<f64>,
}

/// The token counts one generation is priced on (CAR's usage split).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Priced {
    /// Uncached input.
    pub prompt_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub completion_tokens: u64,
}

impl CostModel {
    /// Fails with the field path of the first price that is negative or not finite.
    pub fn check(&self) -> Result<(), String> {
        let rates = |p: &str, r: [Option<f64>; 4]| -> Result<(), String> {
            let names = [
                "input_per_mtok",
                "output_per_mtok",
                "cache_read_input_per_mtok",
                "cache_write_input_per_mtok",
            ];
            for (name, rate) in names.iter().zip(r) {
                if let Some(v) = rate.filter(|v| !v.is_finite() || *v < 0.0) {
                    return Err(format!(
                        "{p}{name}: a price must be a finite number ≥ 0, got {v}"
                    ));
                }
            }
            Ok(())
        };
        rates("", self.rates())?;
        for (i, t) in self.pricing_tiers.iter().enumerate() {
            rates(
                &format!("pricing_tiers[{i}]."),
                [
                    t.input_per_mtok,
                    t.output_per_mtok,
                    t.cache_read_input_per_mtok,
                    t.cache_write_input_per_mtok,
                ],
            )?;
        }
        Ok(())
    }

    fn rates(&self) -> [Option<f64>; 4] {
        [
            self.input_per_mtok,
            self.output_per_mtok,
            self.cache_read_input_per_mtok,
            self.cache_write_input_per_mtok,
        ]
    }

    /// The USD cost of `usage`, or `None` when a rate it needs is unpriced.
    pub fn price(&self, usage: Priced) -> Option<f64> {
        let prompt = usage.prompt_tokens + usage.cache_read_input_tokens;
        let [mut input, mut output, mut read, mut write] = self.rates();
        if let Some(tier) = self
            .pricing_tiers
            .iter()
            .filter(|t| t.min_prompt_tokens <= prompt)
            .max_by_key(|t| t.min_prompt_tokens)
        {
            input = tier.input_per_mtok.or(input);
            output = tier.output_per_mtok.or(output);
            read = tier.cache_read_input_per_mtok.or(read);
            write = tier.cache_write_input_per_mtok.or(write);
        }
        let part = |tokens: u64, rate: Option<f64>| -> Option<f64> {
            if tokens == 0 {
                return Some(0.0);
            }
            rate.map(|r| tokens as f64 * r / 1_000_000.0)
        };
        let (input, output) = (input?, output?);
        Some(
            part(usage.prompt_tokens, Some(input))?
                + part(usage.cache_read_input_tokens, read.or(Some(input)))?
                + part(usage.cache_creation_input_tokens, write.or(Some(input)))?
                + part(usage.completion_tokens, Some(output))?,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u64, read: u64, out: u64) -> Priced {
        Priced {
            prompt_tokens: prompt,
            cache_read_input_tokens: read,
            cache_creation_input_tokens: 0,
            completion_tokens: out,
        }
    }

    #[test]
    fn an_unpriced_model_costs_nothing_known_not_zero() {
        assert_eq!(CostModel::default().price(usage(10, 0, 5)), None);
        let half = CostModel {
            input_per_mtok: Some(1.0),
            ..CostModel::default()
        };
        assert_eq!(half.price(usage(10, 0, 5)), None, "output is unpriced");
    }

    #[test]
    fn prices_are_per_million_tokens_with_cache_reads_at_their_own_rate() {
        let c = CostModel {
            input_per_mtok: Some(3.0),
            output_per_mtok: Some(15.0),
            cache_read_input_per_mtok: Some(0.3),
            ..CostModel::default()
        };
        let cost = c.price(usage(1_000_000, 1_000_000, 100_000)).unwrap();
        assert!((cost - (3.0 + 0.3 + 1.5)).abs() < 1e-9, "{cost}");
        let no_read_rate = CostModel {
            cache_read_input_per_mtok: None,
            ..c
        };
        let cost = no_read_rate.price(usage(0, 1_000_000, 0)).unwrap();
        assert!((cost - 3.0).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn the_highest_tier_not_above_the_prompt_overrides_what_it_declares() {
        let c = CostModel {
            input_per_mtok: Some(1.0),
            output_per_mtok: Some(2.0),
            pricing_tiers: vec![
                PricingTier {
                    min_prompt_tokens: 100,
                    input_per_mtok: Some(10.0),
                    ..PricingTier::default()
                },
                PricingTier {
                    min_prompt_tokens: 1000,
                    input_per_mtok: Some(20.0),
                    ..PricingTier::default()
                },
            ],
            ..CostModel::default()
        };
        let at = |p| c.price(usage(p, 0, 1_000_000)).unwrap();
        assert!((at(99) - (99.0 / 1e6 + 2.0)).abs() < 1e-9);
        assert!((at(500) - (500.0 * 10.0 / 1e6 + 2.0)).abs() < 1e-9);
        assert!((at(1000) - (1000.0 * 20.0 / 1e6 + 2.0)).abs() < 1e-9);
    }

    #[test]
    fn a_negative_price_is_refused_with_its_path() {
        let c = CostModel {
            pricing_tiers: vec![PricingTier {
                min_prompt_tokens: 1,
                output_per_mtok: Some(-1.0),
                ..PricingTier::default()
            }],
            ..CostModel::default()
        };
        assert_eq!(
            c.check().unwrap_err(),
            "pricing_tiers[0].output_per_mtok: a price must be a finite number ≥ 0, got -1"
        );
    }
}
