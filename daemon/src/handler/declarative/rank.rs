//! Ranking services for a need (`declagents.route`, `discovery.resolve`).
//!
//! Similarity compares the need with each service's capability text: by embeddings when
//! an embedding model is registered (the first one, as memory ranking uses), else
//! lexically (`car_declagents::similarity::lexical`). A service that has succeeded
//! before blends in its learned profile (the needs it succeeded at). The score and the
//! prior are `car_declagents::routing`'s.

use car_declagents::routing::{agent_identifier, blend, score};
use car_declagents::similarity;
use car_proto::methods::declagents::{Candidate, Service};

use crate::handler::Call;

/// Something rankable.
#[derive(Debug, Clone)]
pub struct Subject {
    pub id: String,
    pub name: String,
    pub text: String,
    /// Routing-store keys whose outcomes count for it.
    pub keys: Vec<String>,
    /// `declarative` or `connector` (discovery).
    pub kind: &'static str,
    pub identifier: String,
}

impl Subject {
    /// A declarative agent.
    pub fn agent(spec: &car_proto::methods::declagents::DeclarativeAgentSpec) -> Self {
        let id = spec.id.to_string();
        let identifier = agent_identifier(&id);
        Subject {
            name: car_declagents::display_name(spec),
            text: car_declagents::capability_text(spec),
            keys: vec![id.clone(), identifier.clone()],
            kind: "declarative",
            identifier,
            id,
        }
    }
}

/// Similarity of `need` to each text, in order.
async fn similarities(call: &Call, need: &str, texts: Vec<String>) -> Vec<f64> {
    let engine = call.state.inference.engine.clone();
    let model = engine
        .list()
        .into_iter()
        .find(|e| e.kind_name() == "embedding")
        .map(|e| e.id);
    if let Some(model) = model {
        let mut all = vec![need.to_string()];
        all.extend(texts.iter().cloned());
        let embedded =
            crate::state::inference::blocking(move || engine.embed(Some(&model), &all)).await;
        match embedded {
            Ok(r) if r.embeddings.len() == texts.len() + 1 => {
                let (q, rest) = r.embeddings.split_first().expect("the need's embedding");
                return rest.iter().map(|v| similarity::cosine(q, v)).collect();
            }
            Ok(_) => tracing::warn!("embedding model answered the wrong count; ranking lexically"),
            Err(e) => tracing::warn!(error = %e.message, "embedding failed; ranking lexically"),
        }
    }
    texts.iter().map(|t| similarity::lexical(need, t)).collect()
}

/// A subject's ranking figures.
#[derive(Debug, Clone)]
pub struct Ranked {
    pub subject: Subject,
    pub score: f64,
    pub similarity: f64,
    pub success_rate: f64,
    pub edge_weight: f64,
}

/// Ranks `subjects` for `need`, best first; `from` adds its learned edges.
pub async fn rank(
    call: &Call,
    need: &str,
    subjects: Vec<Subject>,
    from: Option<&str>,
) -> Vec<Ranked> {
    let routing = &call.state.data.declagents.routing;
    let learned: Vec<Option<String>> = subjects
        .iter()
        .map(|s| {
            let keys: Vec<&str> = s.keys.iter().map(String::as_str).collect();
            let needs = routing.learned_needs(&keys);
            (!needs.is_empty()).then(|| needs.join(". "))
        })
        .collect();
    let mut texts: Vec<String> = subjects.iter().map(|s| s.text.clone()).collect();
    texts.extend(learned.iter().flatten().cloned());
    let sims = similarities(call, need, texts).await;
    let (cold, learned_sims) = sims.split_at(subjects.len());
    let mut learned_sims = learned_sims.iter();
    let mut ranked: Vec<Ranked> = subjects
        .into_iter()
        .zip(cold)
        .zip(learned)
        .map(|((subject, cold), learned)| {
            let learned = learned.and_then(|_| learned_sims.next().copied());
            let similarity = blend(*cold, learned);
            let keys: Vec<&str> = subject.keys.iter().map(String::as_str).collect();
            let success_rate = routing.success_rate(&keys);
            let edge_weight = from.map_or(0.0, |f| routing.edge(f, &subject.id));
            Ranked {
                score: score(similarity, success_rate, edge_weight),
                similarity,
                success_rate,
                edge_weight,
                subject,
            }
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.subject.id.cmp(&b.subject.id))
    });
    ranked
}

impl Ranked {
    pub fn candidate(&self) -> Candidate {
        Candidate {
            id: self.subject.id.clone(),
            name: self.subject.name.clone(),
            score: self.score,
            similarity: self.similarity,
            success_rate: self.success_rate,
            edge_weight: self.edge_weight,
        }
    }

    pub fn service(&self) -> Service {
        Service {
            identifier: self.subject.identifier.clone(),
            name: self.subject.name.clone(),
            kind: self.subject.kind.to_string(),
            protocol: if self.subject.kind == "declarative" {
                "in-daemon"
            } else {
                "mcp"
            }
            .to_string(),
            score: self.score,
            similarity: self.similarity,
        }
    }
}
