//! Memory at scale through a real release `car-server`: sequential `memory.add_fact`
//! latency (p50, p99) and `memory.query` latency (p50) with the shared graph holding 1k,
//! 10k and 100k facts (issue 17, "memory at scale").
//!
//! Each size is populated fast, in its own memory namespace: the bench builds the graph
//! in-process with `car-memory`, writes it in the `memory.persist` format under the
//! daemon's memory directory, and `memory.load`s it (one compaction). After a warm-up it
//! measures through `car-daemon-client`, alternating between the sizes call by call so
//! contention from the rest of the machine hits each size alike. Facts are English-like: subjects
//! of 3 and bodies of 12–24 words drawn Zipf-distributed (s = 1) from an 8,000-word vocabulary,
//! some tagged; queries are 3–4 words sampled from one stored fact's text (recalling something that
//! was stored), so they mix rare and very common terms. Every add is durable when it returns
//! (journal append + `fdatasync`), as in production; the memory directory is on the daemon's
//! `CAR_HOME`, a temporary directory on the same file system as the build.
//!
//! The ratio the issue's target table names, `add_fact_ratio_100k_1k` (p50 at 100k over p50
//! at 1k, both in this run), is emitted directly. Env: `CAR_BENCH_QUICK=1` (1k and 10k,
//! fewer samples, well under 20 s), `CAR_BENCH_OUT` (write this run's JSON report there),
//! `CAR_SERVER_BIN` (the daemon binary; default: the release one beside this bench).
#![allow(clippy::print_stdout)]

use std::path::Path;
use std::time::Instant;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot};
use car_memory::{FactInput, Graph};
use car_test_harness::Daemon;
use serde_json::{json, Value};

/// A deterministic generator (PCG-style LCG), so every run measures the same facts.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 31) as f64
    }
}

/// Pronounceable pseudo-words with a Zipf (s = 1) sampling table.
struct Vocabulary {
    words: Vec<String>,
    cdf: Vec<f64>,
}

impl Vocabulary {
    fn new(size: usize) -> Self {
        const ONSETS: [&str; 16] = [
            "b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "tr", "st",
        ];
        const VOWELS: [&str; 6] = ["a", "e", "i", "o", "u", "ai"];
        const CODAS: [&str; 8] = ["", "n", "r", "s", "t", "l", "m", "ck"];
        let mut words = Vec::with_capacity(size);
        let mut n = 0usize;
        while words.len() < size {
            let mut w = String::new();
            let mut k = n;
            for _ in 0..(2 + n % 2) {
                w.push_str(ONSETS[k % ONSETS.len()]);
                k /= ONSETS.len();
                w.push_str(VOWELS[k % VOWELS.len()]);
                k /= VOWELS.len();
            }
            w.push_str(CODAS[n % CODAS.len()]);
            n += 7919;
            if !words.contains(&w) {
                words.push(w);
            }
        }
        let mut total = 0.0;
        let mut cdf = Vec::with_capacity(size);
        for rank in 1..=size {
            total += 1.0 / rank as f64;
            cdf.push(total);
        }
        cdf.iter_mut().for_each(|c| *c /= total);
        Self { words, cdf }
    }

    fn word(&self, rng: &mut Rng) -> &str {
        let u = rng.unit().min(1.0);
        let i = self
            .cdf
            .partition_point(|&c| c < u)
            .min(self.words.len() - 1);
        &self.words[i]
    }

    fn text(&self, rng: &mut Rng, words: usize) -> String {
        (0..words)
            .map(|_| self.word(rng))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `(subject, body, tags)` of one fact.
    fn fact(&self, rng: &mut Rng) -> (String, String, Vec<String>) {
        let subject = self.text(rng, 3);
        let len = 12 + rng.below(13);
        let body = self.text(rng, len);
        let tags = (0..rng.below(3))
            .map(|_| format!("topic-{}", rng.below(50)))
            .collect();
        (subject, body, tags)
    }
}

/// Writes a graph of `n` facts in the persist format to `path`; returns the query texts,
/// each 3–4 words of one stored fact.
fn write_seed(path: &Path, n: usize, vocab: &Vocabulary, rng: &mut Rng) -> Vec<String> {
    let mut graph = Graph::new();
    let mut queries = Vec::new();
    for i in 0..n {
        let (subject, body, tags) = vocab.fact(rng);
        if i % (n / 200).max(1) == 0 {
            let words: Vec<&str> = subject.split(' ').chain(body.split(' ')).collect();
            let q: Vec<&str> = (0..3 + rng.below(2))
                .map(|_| words[rng.below(words.len())])
                .collect();
            queries.push(q.join(" "));
        }
        let input = FactInput::new(subject, body)
            .tags(tags)
            .validate()
            .expect("generated fact is valid");
        graph.add_fact_at(input, 1_700_000_000_000 + i as u64);
    }
    std::fs::write(path, car_memory::snapshot::encode(&graph)).expect("write seed snapshot");
    queries
}

fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

struct SizeFigures {
    label: &'static str,
    add_p50_us: f64,
    add_p99_us: f64,
    query_p50_us: f64,
    query_hits: usize,
}

/// One size under test: its own memory namespace (so every size stays loaded and the
/// measurements can alternate between them), its client and its queries.
struct Scope {
    label: &'static str,
    client: Client,
    queries: Vec<String>,
    add_us: Vec<f64>,
    query_us: Vec<f64>,
    query_hits: usize,
}

/// Loads a generated graph of `n` facts into a fresh namespace.
async fn populate(
    home: &Path,
    (label, n): (&'static str, usize),
    vocab: &Vocabulary,
    rng: &mut Rng,
) -> Scope {
    let client = Client::new(
        ClientConfig::with_env(EnvSnapshot::with_car_home(home))
            .memory_namespace(format!("bench-{label}")),
    );
    let file = format!("bench-seed-{n}.json");
    let path = home.join("memory").join(&file);
    let queries = write_seed(&path, n, vocab, rng);
    let loaded = client
        .call("memory.load", json!({"path": file}))
        .await
        .expect("memory.load");
    assert_eq!(loaded, json!(n), "memory.load answered {loaded}");
    // Removed before its dirty pages are written back, so they add no I/O to the run.
    std::fs::remove_file(&path).expect("remove seed file");
    Scope {
        label,
        client,
        queries,
        add_us: Vec::new(),
        query_us: Vec::new(),
        query_hits: 0,
    }
}

fn new_fact(vocab: &Vocabulary, rng: &mut Rng) -> Value {
    let (subject, body, tags) = vocab.fact(rng);
    json!({"subject": subject, "body": body, "tags": tags})
}

impl Scope {
    async fn add(&mut self, params: Value) {
        let started = Instant::now();
        let r = self
            .client
            .call("memory.add_fact", params)
            .await
            .expect("add_fact");
        self.add_us.push(started.elapsed().as_secs_f64() * 1e6);
        assert!(r.is_u64(), "add_fact answered {r}");
    }

    async fn query(&mut self, i: usize) {
        let params = json!({"query": self.queries[i % self.queries.len()], "k": 10});
        let started = Instant::now();
        let r: Value = self
            .client
            .call("memory.query", params)
            .await
            .expect("query");
        self.query_us.push(started.elapsed().as_secs_f64() * 1e6);
        self.query_hits += r.as_array().map_or(0, Vec::len);
    }

    fn figures(&self) -> SizeFigures {
        SizeFigures {
            label: self.label,
            add_p50_us: percentile(&self.add_us, 0.5),
            add_p99_us: percentile(&self.add_us, 0.99),
            query_p50_us: percentile(&self.query_us, 0.5),
            query_hits: self.query_hits,
        }
    }
}

/// Populates every size, warms up, then measures adds and queries alternating between
/// the sizes call by call, so disk and CPU contention from the rest of the machine hit
/// every size alike (the fsync behind each add is most of its cost).
async fn measure(
    home: &Path,
    sizes: &[(&'static str, usize)],
    (adds, queries): (usize, usize),
) -> Vec<SizeFigures> {
    let vocab = Vocabulary::new(8_000);
    let mut rng = Rng(17);
    let mut scopes = Vec::new();
    for &size in sizes {
        scopes.push(populate(home, size, &vocab, &mut rng).await);
    }
    for i in 0..20 {
        for s in &mut scopes {
            s.add(new_fact(&vocab, &mut rng)).await;
            s.query(i).await;
        }
    }
    for s in &mut scopes {
        s.add_us.clear();
        s.query_us.clear();
        s.query_hits = 0;
    }
    for _ in 0..adds {
        for s in &mut scopes {
            s.add(new_fact(&vocab, &mut rng)).await;
        }
    }
    for i in 0..queries {
        for s in &mut scopes {
            s.query(i).await;
        }
    }
    scopes.iter().map(Scope::figures).collect()
}

fn main() {
    let quick = std::env::var("CAR_BENCH_QUICK").is_ok_and(|v| v == "1");
    let sizes: &[(&'static str, usize)] = if quick {
        &[("1k", 1_000), ("10k", 10_000)]
    } else {
        &[("1k", 1_000), ("10k", 10_000), ("100k", 100_000)]
    };
    let samples = if quick { (150, 150) } else { (500, 400) };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let home = tempfile::tempdir().expect("temp CAR_HOME");
    std::fs::create_dir_all(home.path().join("memory")).expect("memory dir");
    let daemon = Daemon::builder().home(home.path()).start();
    let started = Instant::now();
    let figures = runtime.block_on(measure(&daemon.home, sizes, samples));
    drop(daemon);

    println!(
        "memory at scale (release car-server, sequential calls, {} adds / {} queries per size, {:.1} s)",
        samples.0,
        samples.1,
        started.elapsed().as_secs_f64()
    );
    println!(
        "{:>6} {:>14} {:>14} {:>14} {:>12}",
        "facts", "add p50 µs", "add p99 µs", "query p50 µs", "hits/query"
    );
    let mut metrics = serde_json::Map::new();
    let mut metric = |name: String, value: f64, unit: &str| {
        metrics.insert(name, json!({"value": value, "unit": unit}));
    };
    for f in &figures {
        println!(
            "{:>6} {:>14.0} {:>14.0} {:>14.0} {:>12.1}",
            f.label,
            f.add_p50_us,
            f.add_p99_us,
            f.query_p50_us,
            f.query_hits as f64 / samples.1 as f64
        );
        metric(format!("add_fact_p50_us_{}", f.label), f.add_p50_us, "µs");
        metric(format!("add_fact_p99_us_{}", f.label), f.add_p99_us, "µs");
        metric(format!("query_p50_us_{}", f.label), f.query_p50_us, "µs");
    }
    // p50 at each larger size over p50 at 1k (the target is the 100k one; quick runs,
    // which stop at 10k, report the 10k one only).
    if let Some(small) = figures.iter().find(|f| f.label == "1k") {
        for f in figures.iter().filter(|f| f.label != "1k") {
            let ratio = f.add_p50_us / small.add_p50_us;
            println!("add_fact p50 {} / 1k: {ratio:.2}", f.label);
            metric(format!("add_fact_ratio_{}_1k", f.label), ratio, "ratio");
        }
    }
    if let Some(out) = std::env::var_os("CAR_BENCH_OUT") {
        let report = json!({"component": "memory", "metrics": metrics});
        std::fs::write(
            &out,
            serde_json::to_vec_pretty(&report).expect("report JSON"),
        )
        .expect("write CAR_BENCH_OUT");
    }
}
