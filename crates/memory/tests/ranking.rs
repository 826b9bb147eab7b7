//! Ranking quality on the shared fixture `tests/vectors/memory-ranking.json`, and the
//! blending of embedding similarity with a deterministic fake embedder.

use car_memory::{Embedder, Embeddings, FactInput, FactKind, Graph};
use serde::Deserialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Deserialize)]
struct Fixture {
    facts: Vec<FixtureFact>,
    queries: Vec<LabelledQuery>,
}

#[derive(Deserialize)]
struct FixtureFact {
    fact_id: String,
    subject: String,
    body: String,
    kind: FactKind,
    tags: Vec<String>,
}

#[derive(Deserialize)]
struct LabelledQuery {
    query: String,
    expected_fact_id: String,
}

fn fixture_graph() -> (Graph, Vec<LabelledQuery>) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/vectors/memory-ranking.json"
    );
    let text = std::fs::read_to_string(path).expect("ranking fixture");
    let fixture: Fixture = serde_json::from_str(&text).expect("valid fixture");
    assert_eq!(fixture.facts.len(), 200);
    assert_eq!(fixture.queries.len(), 20);
    let mut graph = Graph::new();
    for f in fixture.facts {
        let input = FactInput::new(f.subject, f.body)
            .fact_id(f.fact_id)
            .kind(f.kind)
            .tags(f.tags);
        graph.add_fact_at(input.validate().expect("fixture fact is valid"), 1);
    }
    assert_eq!(graph.fact_count(), 200);
    (graph, fixture.queries)
}

#[test]
fn lexical_ranking_puts_the_expected_fact_in_the_top_three() {
    let (graph, queries) = fixture_graph();
    let (mut hits, mut first) = (0, 0);
    for q in &queries {
        let ranked = graph.query(&q.query, 3, None).unwrap();
        let ids: Vec<&str> = ranked.iter().map(|h| h.fact_id.as_str()).collect();
        if ids.first() == Some(&q.expected_fact_id.as_str()) {
            first += 1;
        }
        if ids.contains(&q.expected_fact_id.as_str()) {
            hits += 1;
        } else {
            eprintln!(
                "miss: {:?} expected {} got {ids:?}",
                q.query, q.expected_fact_id
            );
        }
        assert!(ranked
            .iter()
            .all(|h| h.confidence > 0.0 && h.confidence <= 1.0));
        assert!(ranked
            .windows(2)
            .all(|w| w[0].confidence >= w[1].confidence));
    }
    eprintln!(
        "memory ranking hit rate (top 3): {hits}/{} = {:.0}% (top 1: {first})",
        queries.len(),
        100.0 * hits as f64 / queries.len() as f64
    );
    assert!(hits >= 18, "only {hits}/20 expected facts in the top 3");
}

/// Maps a text to a 3-d vector by counting marker words, so similarity is predictable:
/// axis 0 "alpha", axis 1 "beta", axis 2 everything else (a small constant).
struct MarkerEmbedder {
    calls: AtomicUsize,
    texts: AtomicUsize,
}

impl Embedder for MarkerEmbedder {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(texts
            .iter()
            .map(|t| {
                let lower = t.to_lowercase();
                vec![
                    lower.matches("alpha").count() as f32,
                    lower.matches("beta").count() as f32,
                    0.1,
                ]
            })
            .collect())
    }

    fn model_id(&self) -> &str {
        "marker-3d"
    }
}

#[test]
fn embedding_similarity_is_blended_and_fact_vectors_are_cached() {
    let mut graph = Graph::new();
    // Both facts match the query word "rollout" once, lexically a tie broken by id ("a" < "b");
    // the embedding prefers "b" because it shares the query's marker word.
    graph.add_fact_at(
        FactInput::new("rollout alpha", "the rollout plan")
            .fact_id("a")
            .validate()
            .unwrap(),
        1,
    );
    graph.add_fact_at(
        FactInput::new("rollout beta", "the rollout plan")
            .fact_id("b")
            .validate()
            .unwrap(),
        1,
    );
    graph.add_fact_at(
        FactInput::new("unrelated", "beta beta beta")
            .fact_id("c")
            .validate()
            .unwrap(),
        1,
    );

    let lexical = graph.query("rollout", 3, None).unwrap();
    assert_eq!(
        lexical
            .iter()
            .map(|h| h.fact_id.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"]
    );

    let embedder = Arc::new(MarkerEmbedder {
        calls: AtomicUsize::new(0),
        texts: AtomicUsize::new(0),
    });
    let embeddings = Embeddings::new(embedder.clone());
    let blended = graph.query_with("rollout beta", 3, &embeddings).unwrap();
    let ids: Vec<&str> = blended.iter().map(|h| h.fact_id.as_str()).collect();
    assert_eq!(ids[0], "b", "{blended:?}");
    assert!(
        ids.contains(&"c"),
        "semantic similarity alone can surface a fact: {blended:?}"
    );
    assert!(blended.iter().all(|h| (0.0..=1.0).contains(&h.confidence)));
    assert_eq!(
        embedder.texts.load(Ordering::SeqCst),
        4,
        "query + three facts"
    );

    graph.query_with("rollout alpha", 3, &embeddings).unwrap();
    assert_eq!(
        embedder.texts.load(Ordering::SeqCst),
        5,
        "fact vectors are computed once"
    );
    assert_eq!(embedder.calls.load(Ordering::SeqCst), 2);
}

#[test]
fn a_failing_embedder_degrades_to_lexical_ranking() {
    struct Broken;
    impl Embedder for Broken {
        fn embed(&self, _: &[&str]) -> Result<Vec<Vec<f32>>, String> {
            Err("model not loaded".into())
        }
        fn model_id(&self) -> &str {
            "broken"
        }
    }
    let mut graph = Graph::new();
    graph.add_fact_at(
        FactInput::new("rollout", "plan")
            .fact_id("a")
            .validate()
            .unwrap(),
        1,
    );
    let hits = graph
        .query_with("rollout", 3, &Embeddings::new(Arc::new(Broken)))
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        hits[0].confidence,
        graph.query("rollout", 3, None).unwrap()[0].confidence
    );
}
