//! Local embeddings and classification on the real all-MiniLM-L6-v2.

mod common;

use car_inference::embed::cosine;
use car_inference::ErrorKind;
use common::{engine, EMBED_ID};

fn texts(t: &[&str]) -> Vec<String> {
    t.iter().map(|s| (*s).to_owned()).collect()
}

/// Acceptance 6 (engine side): identical texts → cosine 1.0, a paraphrase pair above an
/// unrelated pair.
#[test]
fn embeddings_have_the_expected_geometry() {
    let (_home, engine) = engine();
    let out = engine
        .embed(
            Some(EMBED_ID),
            &texts(&[
                "The cat sits on the mat.",
                "The cat sits on the mat.",
                "A cat is sitting on a rug.",
                "Quarterly revenue grew by eight percent.",
            ]),
        )
        .unwrap();
    let e = &out.embeddings;
    assert_eq!(e.len(), 4);
    for v in e {
        assert_eq!(v.len(), 384);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
    let same = cosine(&e[0], &e[1]);
    let para = cosine(&e[0], &e[2]);
    let unrelated = cosine(&e[0], &e[3]);
    assert!(same > 0.9999, "identical {same}");
    assert!(
        para > unrelated + 0.2,
        "paraphrase {para} vs unrelated {unrelated}"
    );
    assert_eq!(
        out.model_identity,
        engine.registry().get(EMBED_ID).unwrap().identity()
    );
}

/// Padding in a batch must not change a text's vector, and batches beyond one forward pass
/// keep the input order.
#[test]
fn batching_does_not_change_vectors() {
    let (_home, engine) = engine();
    let many: Vec<String> = (0..40)
        .map(|i| {
            format!(
                "sentence number {i} about {}",
                if i % 2 == 0 {
                    "rain"
                } else {
                    "a much longer topic such as the economics of medieval trade routes"
                }
            )
        })
        .collect();
    let batch = engine.embed(None, &many).unwrap().embeddings;
    for i in [0usize, 1, 33, 39] {
        let single = engine.embed(None, &many[i..=i]).unwrap().embeddings;
        let c = cosine(&batch[i], &single[0]);
        assert!(c > 0.9999, "text {i}: cosine {c}");
    }
}

#[test]
fn classify_ranks_the_right_label_first() {
    let (_home, engine) = engine();
    let labels = texts(&["sports", "cooking", "finance"]);
    let out = engine
        .classify(
            Some(EMBED_ID),
            "The striker scored twice and the team won the football match.",
            &labels,
        )
        .unwrap();
    assert_eq!(out.scores[0].label, "sports", "{:?}", out.scores);
    let total: f32 = out.scores.iter().map(|s| s.score).sum();
    assert!((total - 1.0).abs() < 1e-4);
    assert!(out.scores.windows(2).all(|w| w[0].score >= w[1].score));

    let out = engine
        .classify(
            None,
            "Whisk the eggs, then fold in the flour and bake.",
            &labels,
        )
        .unwrap();
    assert_eq!(out.scores[0].label, "cooking", "{:?}", out.scores);
}

#[test]
fn bad_embedding_calls_get_precise_errors() {
    let (_home, engine) = engine();
    let err = engine.embed(Some(EMBED_ID), &[]).unwrap_err();
    assert_eq!(err.to_string(), "invalid texts: must not be empty");
    let err = engine
        .embed(Some(common::GGUF_ID), &texts(&["x"]))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidParams);
    let err = engine.tokenize(Some(EMBED_ID), "x").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidParams);
}
