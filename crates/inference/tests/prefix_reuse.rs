//! KV prefix reuse across turns on the real SmolLM2-135M-Instruct GGUF: a conversation's
//! next turn evaluates only what it does not share with the previous request, answers as
//! a cold prefill of the same context would, and honours `cache_control: false` and a zero
//! budget. (How much faster that makes a turn is a benchmark, not a test.)

mod common;

use car_inference::{CacheHint, CancelToken, GenerateRequest, GenerateResult, Message};
use common::{engine, engine_with, GGUF_ID};

fn turn(messages: &[Message], cache: bool) -> GenerateRequest {
    GenerateRequest {
        system: Some("You are a helpful assistant who answers briefly.".into()),
        messages: Some(messages.to_vec()),
        max_tokens: Some(12),
        temperature: Some(0.0),
        cache: CacheHint {
            enabled: cache,
            ..CacheHint::default()
        },
        ..Default::default()
    }
}

fn run(engine: &car_inference::InferenceEngine, req: &GenerateRequest) -> GenerateResult {
    engine
        .generate(Some(GGUF_ID), req, &CancelToken::new(), None)
        .unwrap()
}

fn whole_prompt(r: &GenerateResult) -> u32 {
    r.usage.prompt_tokens + r.usage.cache_read_tokens
}

#[test]
fn each_turn_reuses_the_prefix_it_shares_with_the_previous_one() {
    let _serial = common::serial();
    let (_home, engine) = engine();
    let mut conversation = vec![Message::new("user", "Name a colour of the sky.")];
    let first = run(&engine, &turn(&conversation, true));
    assert_eq!(first.usage.cache_read_tokens, 0, "{:?}", first.usage);

    let mut previous = whole_prompt(&first);
    for question in ["And of grass?", "And of snow?", "And of coal?"] {
        conversation.push(Message::new("assistant", first.text.clone()));
        conversation.push(Message::new("user", question));
        let warm = run(&engine, &turn(&conversation, true));
        // Everything the previous prompt held is read back, and only the new tail is
        // evaluated.
        assert!(
            warm.usage.cache_read_tokens >= previous,
            "turn reused {} of the previous prompt's {previous} tokens",
            warm.usage.cache_read_tokens
        );
        assert!(warm.usage.prompt_tokens >= 1);
        assert!(
            warm.usage.prompt_tokens < whole_prompt(&warm) / 2,
            "{:?}",
            warm.usage
        );

        // A cold prefill of the same context gives the same greedy answer.
        let cold = run(&engine, &turn(&conversation, false));
        assert_eq!(cold.usage.cache_read_tokens, 0);
        assert_eq!(whole_prompt(&cold), whole_prompt(&warm));
        assert_eq!(cold.text, warm.text, "reuse changed the answer");
        previous = whole_prompt(&warm);
    }
}

#[test]
fn the_same_prompt_again_evaluates_only_its_last_token() {
    let _serial = common::serial();
    let (_home, engine) = engine();
    let conversation = vec![Message::new("user", "Say hello to the reader, politely.")];
    let first = run(&engine, &turn(&conversation, true));
    let again = run(&engine, &turn(&conversation, true));
    assert_eq!(again.usage.prompt_tokens, 1, "{:?}", again.usage);
    assert_eq!(again.usage.cache_read_tokens, whole_prompt(&first) - 1);
    assert_eq!(again.text, first.text);
}

#[test]
fn opting_out_neither_reads_nor_saves() {
    let _serial = common::serial();
    let (_home, engine) = engine();
    let conversation = vec![Message::new("user", "Count from one to three.")];
    run(&engine, &turn(&conversation, false));
    // Nothing was saved by the opted-out request, so this one starts cold too.
    let next = run(&engine, &turn(&conversation, true));
    assert_eq!(next.usage.cache_read_tokens, 0);
}

#[test]
fn a_zero_budget_keeps_nothing() {
    let _serial = common::serial();
    let (_home, engine) = engine_with(|c| c.llama.prefix_cache_bytes = 0);
    let conversation = vec![Message::new("user", "Count from one to three.")];
    run(&engine, &turn(&conversation, true));
    let next = run(&engine, &turn(&conversation, true));
    assert_eq!(next.usage.cache_read_tokens, 0);
}
