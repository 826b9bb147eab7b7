//! Text analysis shared by ranking, skill matching and consolidation.
//!
//! Owns the one normalisation pipeline: Unicode lower-casing, splitting on anything that is
//! not alphanumeric (so `JSON-RPC`, `snake_case` and `path/to` split into words), English
//! stop-word removal and Snowball English stemming (`retries`, `retry`, `retrying` → `retri`).
//! It must not know about facts, skills or scores: it turns text into terms and nothing else.

use rust_stemmers::{Algorithm, Stemmer};
use std::sync::OnceLock;

/// English stop words: function words that carry no topic. Negations (`no`, `not`,
/// `never`) and modal verbs such as `must` are deliberately kept, because constraints and
/// preferences hinge on them.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

fn stemmer() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

/// Splits `text` into lower-case words (Unicode-aware), before stop words or stemming.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// The analysed terms of `text`, in order, duplicates kept: lower-cased, stop words removed,
/// stemmed. A word made only of digits is kept as is (version numbers, ports).
pub fn terms(text: &str) -> Vec<String> {
    words(text)
        .filter(|w| !is_stop_word(w))
        .map(|w| {
            if w.chars().all(|c| c.is_ascii_digit()) {
                w
            } else {
                stemmer().stem(&w).into_owned()
            }
        })
        .collect()
}

/// Lower-cases and collapses every run of non-alphanumerics into one space: the
/// "normalised text" that makes two facts exact duplicates for consolidation.
pub fn normalise(text: &str) -> String {
    words(text).collect::<Vec<_>>().join(" ")
}

/// Conservative token estimate for a text: one token per three UTF-8 bytes, rounded up.
/// English averages about four characters per token with BPE tokenisers, code about three,
/// and CJK text about one token per character (three bytes), so bytes / 3 over-estimates
/// in the common cases and never badly under-estimates.
pub fn estimate_tokens(text: &str) -> usize {
    tokens_for_bytes(text.len())
}

/// [`estimate_tokens`] for a byte length.
pub fn tokens_for_bytes(bytes: usize) -> usize {
    bytes.div_ceil(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        let mut sorted = STOP_WORDS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, STOP_WORDS);
    }

    #[test]
    fn word_forms_share_a_stem() {
        assert_eq!(terms("retries"), terms("retry"));
        assert_eq!(terms("Retrying"), terms("retried"));
        assert_eq!(terms("connections"), terms("connection"));
        assert_eq!(terms("The tests are failing"), vec!["test", "fail"]);
    }

    #[test]
    fn splits_on_punctuation_and_keeps_negations_and_numbers() {
        assert_eq!(
            terms("Never push to main; JSON-RPC on port 8080"),
            vec!["never", "push", "main", "json", "rpc", "port", "8080"]
        );
    }

    #[test]
    fn unicode_words_are_lower_cased_and_kept() {
        assert_eq!(
            words("Ünïcode naïve Straße").collect::<Vec<_>>(),
            ["ünïcode", "naïve", "straße"]
        );
        assert_eq!(terms("日本語 テキスト").len(), 2);
    }

    #[test]
    fn normalise_ignores_case_and_punctuation() {
        assert_eq!(
            normalise("  Use   TABS, not spaces! "),
            "use tabs not spaces"
        );
        assert_eq!(
            normalise("use tabs not spaces"),
            normalise("Use tabs -- not spaces.")
        );
    }

    #[test]
    fn token_estimate_rounds_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abc"), 1);
        assert_eq!(estimate_tokens("abcd"), 2);
        assert_eq!(estimate_tokens("日"), 1);
    }
}
