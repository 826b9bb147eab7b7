//! Skills end to end on a graph: ingest, find by task/persona/url (scored, best first),
//! supersede, outcomes and the degraded flag, listing by domain, and bad inputs.

use car_memory::{Graph, MemoryError, Outcome, SkillInput, SkillQuery, SkillStats};

fn skill(
    name: &str,
    persona: &str,
    url_pattern: &str,
    keywords: &[&str],
    description: &str,
) -> SkillInput {
    SkillInput {
        name: name.into(),
        code: format!("run_{name}()"),
        platform: "browser".into(),
        persona: persona.into(),
        url_pattern: url_pattern.into(),
        task_keywords: keywords.iter().map(|k| k.to_string()).collect(),
        description: description.into(),
        supersedes: None,
    }
}

fn graph() -> Graph {
    let mut g = Graph::new();
    let skills = [
        skill(
            "github-login",
            "developer",
            "https://github.com/*",
            &["login", "sign in"],
            "signs into GitHub with a passkey",
        ),
        skill(
            "github-pr-review",
            "developer",
            "https://github.com/*/pull/*",
            &["review", "pull request"],
            "leaves review comments on a pull request",
        ),
        skill(
            "generic-login",
            "",
            "",
            &["login"],
            "fills any username and password form",
        ),
        skill(
            "jira-ticket",
            "manager",
            "https://*.atlassian.net/*",
            &["ticket", "issue"],
            "files a Jira ticket",
        ),
    ];
    for (i, s) in skills.into_iter().enumerate() {
        assert_eq!(g.ingest_skill(s.validate().unwrap()).unwrap(), i + 1);
    }
    g
}

fn names(rows: &[car_memory::SkillMatch]) -> Vec<&str> {
    rows.iter().map(|r| r.name.as_str()).collect()
}

fn find(g: &Graph, persona: &str, url: &str, task: &str) -> Vec<car_memory::SkillMatch> {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    g.find_skills(&SkillQuery {
        persona: opt(persona),
        url: opt(url),
        task: opt(task),
        max_results: Some(100),
    })
    .unwrap()
}

/// `0.5 + 0.5 × L / (L + 8)` for a glob match with `L` literal characters.
fn glob(literal: f64) -> f64 {
    0.5 + 0.5 * literal / (literal + 8.0)
}

#[test]
fn find_by_task_persona_and_url_best_first() {
    let g = graph();
    // Equal task scores tie-break on successes, then name.
    let rows = find(&g, "", "", "Logins");
    assert_eq!(names(&rows), ["generic-login", "github-login"], "{rows:?}");
    assert_eq!(
        names(&find(&g, "", "", "signing in")),
        ["github-login"],
        "keywords match by stem"
    );
    let rows = find(&g, "", "", "passkeys");
    assert_eq!(names(&rows), ["github-login"]);
    assert_eq!(
        rows[0].match_score, 0.5,
        "a description-only match counts half"
    );

    // Every criterion contributes; the PR skill misses the task and the path but shares
    // the persona and the host, so it is offered last rather than dropped.
    let rows = find(&g, "Developer", "https://github.com/settings", "login");
    assert_eq!(
        names(&rows),
        ["github-login", "generic-login", "github-pr-review"]
    );
    let scores: Vec<f64> = rows.iter().map(|r| r.match_score).collect();
    assert_eq!(
        scores,
        [
            0.2 * 1.0 + 0.3 * glob(19.0) + 0.5 * 1.0,
            0.2 * 0.5 + 0.3 * 0.5 + 0.5 * 1.0,
            0.2 * 1.0 + 0.3 * 0.2 + 0.5 * 0.0,
        ]
    );
    assert!(rows.iter().all(|r| !r.code.is_empty()));

    let rows = find(&g, "", "https://github.com/acme/app/pull/7", "");
    assert_eq!(
        names(&rows),
        ["github-pr-review", "github-login"],
        "the more specific pattern wins; generic and other-site skills match nothing"
    );
    assert_eq!(rows[0].match_score, glob(25.0));

    let rows = find(&g, "manager", "https://acme.atlassian.net/browse/X-1", "");
    assert_eq!(names(&rows), ["jira-ticket"]);
    assert_eq!(
        rows[0].match_score,
        (0.2 * 1.0 + 0.3 * glob(23.0)) / (0.2 + 0.3)
    );

    assert!(find(&g, "", "", "bake bread").is_empty());
    assert_eq!(
        names(&find(&g, "developer", "https://example.com", "bake bread")),
        ["github-login", "github-pr-review"],
        "the persona alone carries a skill; generic credit alone never does"
    );
    assert!(
        find(&g, "chef", "https://example.com", "bake bread").is_empty(),
        "score 0 is not returned"
    );
}

#[test]
fn a_url_mismatch_lowers_the_score_instead_of_excluding() {
    let mut g = graph();
    g.ingest_skill(
        skill(
            "gitlab-login",
            "developer",
            "https://gitlab.com/*",
            &["login"],
            "signs into GitLab",
        )
        .validate()
        .unwrap(),
    )
    .unwrap();
    let rows = find(&g, "developer", "https://github.com/login", "login");
    assert_eq!(
        names(&rows),
        [
            "github-login",
            "generic-login",
            "gitlab-login",
            "github-pr-review"
        ]
    );
    let gitlab = &rows[2];
    assert_eq!(gitlab.match_score, 0.2 * 1.0 + 0.3 * 0.0 + 0.5 * 1.0);
    // Below the skill for any URL, above a same-host skill that misses the task.
    assert!(rows[1].match_score > gitlab.match_score);
    assert!(gitlab.match_score > rows[3].match_score);
    // With only the URL given, nothing else can carry it, so it is dropped.
    assert!(!names(&find(&g, "", "https://github.com/login", "")).contains(&"gitlab-login"));
}

#[test]
fn default_max_results_is_one_and_rows_carry_stats() {
    let mut g = graph();
    g.report_outcome("github-login", Outcome::Success).unwrap();
    let q = SkillQuery {
        task: Some("login".into()),
        ..Default::default()
    };
    let rows = g.find_skills(&q).unwrap();
    assert_eq!(names(&rows), ["github-login"], "more successes win the tie");
    let all = g.find_skills(&SkillQuery::default()).unwrap();
    assert_eq!(
        all.len(),
        1,
        "no criteria: every skill scores 1, one returned"
    );
    assert_eq!(all[0].match_score, 1.0);

    let row = serde_json::to_value(&rows[0]).unwrap();
    assert_eq!(
        row["stats"],
        serde_json::json!({"success_count": 1, "fail_count": 0, "degraded": false})
    );
    for key in ["name", "code", "platform", "description", "match_score"] {
        assert!(row.get(key).is_some(), "{key} missing: {row}");
    }
    assert_eq!(row["name"], "github-login");
    assert_eq!(row["code"], "run_github-login()");
    assert_eq!(row["platform"], "browser");
    assert_eq!(row["description"], "signs into GitHub with a passkey");
    assert_eq!(row["success_count"], 1, "flat copies stay");
    assert_eq!(
        rows[0].stats,
        SkillStats {
            success_count: rows[0].success_count,
            fail_count: rows[0].fail_count,
            degraded: rows[0].degraded
        }
    );
}

#[test]
fn degraded_skills_are_halved_and_lose_ties() {
    let mut g = Graph::new();
    g.ingest_skill(
        skill("a-keyword", "", "", &["login"], "")
            .validate()
            .unwrap(),
    )
    .unwrap();
    g.ingest_skill(
        skill("b-description", "", "", &[], "does a login")
            .validate()
            .unwrap(),
    )
    .unwrap();
    g.report_outcome("a-keyword", Outcome::Success).unwrap();
    for _ in 0..4 {
        g.report_outcome("a-keyword", Outcome::Fail).unwrap();
    }
    // a: keyword match 1.0, degraded (4 > 1 + 2) → 0.5; b: description match 0.5.
    let rows = find(&g, "", "", "login");
    assert_eq!(names(&rows), ["b-description", "a-keyword"]);
    assert_eq!(
        rows.iter()
            .map(|r| (r.match_score, r.degraded, r.success_count))
            .collect::<Vec<_>>(),
        [(0.5, false, 0), (0.5, true, 1)],
        "equal scores: the non-degraded skill first despite fewer successes"
    );
    g.report_outcome("a-keyword", Outcome::Success).unwrap();
    let rows = find(&g, "", "", "login");
    assert_eq!(names(&rows), ["a-keyword", "b-description"], "recovered");
    assert_eq!(rows[0].match_score, 1.0);
}

#[test]
fn supersedes_hides_the_old_skill() {
    let mut g = graph();
    let mut newer = skill(
        "github-login-v2",
        "developer",
        "https://github.com/*",
        &["login"],
        "signs in with SSO",
    );
    newer.supersedes = Some("github-login".into());
    assert_eq!(g.ingest_skill(newer.validate().unwrap()).unwrap(), 5);
    assert_eq!(
        names(&find(&g, "", "", "login")),
        ["generic-login", "github-login-v2"],
        "the superseded github-login is never offered"
    );
    assert_eq!(
        g.skill("github-login").unwrap().superseded_by.as_deref(),
        Some("github-login-v2")
    );

    let mut bad = skill("x", "", "", &[], "");
    bad.supersedes = Some("nope".into());
    let err = g.ingest_skill(bad.validate().unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "supersedes: names an unknown skill \"nope\""
    );
    assert_eq!(g.skill_count(), 5, "a refused ingest changes nothing");
}

#[test]
fn same_name_replaces_and_resets_history_only_when_code_changes() {
    let mut g = graph();
    g.report_outcome("generic-login", Outcome::Success).unwrap();
    assert_eq!(
        g.ingest_skill(
            skill("generic-login", "", "", &["login"], "new words")
                .validate()
                .unwrap()
        )
        .unwrap(),
        4
    );
    assert_eq!(
        g.skill("generic-login").unwrap().success_count,
        1,
        "same code keeps history"
    );
    let mut changed = skill("generic-login", "", "", &["login"], "");
    changed.code = "new_code()".into();
    g.ingest_skill(changed.validate().unwrap()).unwrap();
    assert_eq!(g.skill("generic-login").unwrap().success_count, 0);
}

#[test]
fn outcomes_flip_degraded_as_documented() {
    let mut g = graph();
    for expected_fails in 1..=2 {
        let r = g.report_outcome("jira-ticket", Outcome::Fail).unwrap();
        assert_eq!((r.fail_count, r.degraded), (expected_fails, false));
    }
    let r = g.report_outcome("jira-ticket", Outcome::Fail).unwrap();
    assert_eq!(
        r,
        SkillStats {
            success_count: 0,
            fail_count: 3,
            degraded: true
        },
        "3 > 0 + 2"
    );
    let rows = find(&g, "manager", "", "");
    let row = rows.iter().find(|r| r.name == "jira-ticket").unwrap();
    assert!(
        row.degraded && row.stats.degraded && row.match_score == 0.5,
        "degraded halves the score: {row:?}"
    );
    let r = g
        .report_outcome("jira-ticket", "done".parse().unwrap())
        .unwrap();
    assert_eq!(
        (r.success_count, r.fail_count, r.degraded),
        (0, 4, true),
        "any string but success is a failure"
    );
    let r = g
        .report_outcome("jira-ticket", "success".parse().unwrap())
        .unwrap();
    assert_eq!((r.success_count, r.fail_count, r.degraded), (1, 4, true));
    let r = g.report_outcome("jira-ticket", Outcome::Success).unwrap();
    assert_eq!(
        (r.success_count, r.fail_count, r.degraded),
        (2, 4, false),
        "recovers as soon as 4 > 2 + 2 stops holding"
    );
    assert_eq!(g.skill("jira-ticket").unwrap().stats(), r);
    let r = g.report_outcome("jira-ticket", Outcome::Fail).unwrap();
    assert_eq!((r.fail_count, r.degraded), (5, true), "and degrades again");

    let err = g.report_outcome("missing", Outcome::Success).unwrap_err();
    assert!(matches!(err, MemoryError::SkillNotFound { .. }));
    assert_eq!(err.to_string(), "name: names an unknown skill \"missing\"");
    assert_eq!(
        "".parse::<Outcome>().unwrap_err().to_string(),
        "outcome: must not be empty"
    );
    assert_eq!("broken".parse::<Outcome>().unwrap(), Outcome::Fail);
    assert_eq!("fail".parse::<Outcome>().unwrap(), Outcome::Fail);
}

#[test]
fn reingesting_same_code_keeps_counts_and_recomputes_degraded() {
    let mut g = graph();
    for _ in 0..3 {
        g.report_outcome("generic-login", Outcome::Fail).unwrap();
    }
    assert!(g.skill("generic-login").unwrap().degraded);
    g.ingest_skill(
        skill("generic-login", "", "", &["login"], "same code")
            .validate()
            .unwrap(),
    )
    .unwrap();
    let s = g.skill("generic-login").unwrap();
    assert_eq!((s.fail_count, s.degraded), (3, true));
    let mut changed = skill("generic-login", "", "", &["login"], "");
    changed.code = "new_code()".into();
    g.ingest_skill(changed.validate().unwrap()).unwrap();
    let s = g.skill("generic-login").unwrap();
    assert_eq!((s.success_count, s.fail_count, s.degraded), (0, 0, false));
}

#[test]
fn list_by_domain() {
    let g = graph();
    assert_eq!(g.list_skills(None).len(), 4);
    let github: Vec<String> = g
        .list_skills(Some("github.com"))
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(github, ["github-login", "github-pr-review"]);
    let jira: Vec<String> = g
        .list_skills(Some("https://atlassian.net"))
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(jira, ["jira-ticket"]);
    assert!(g.list_skills(Some("example.com")).is_empty());
}

#[test]
fn bad_skill_inputs_name_their_field() {
    let cases = [
        (skill("", "", "", &[], ""), "name: must not be empty"),
        (
            SkillInput {
                code: " ".into(),
                ..skill("n", "", "", &[], "")
            },
            "code: must not be empty",
        ),
        (
            skill("n", "", "", &["ok", ""], ""),
            "task_keywords: entries must not be empty",
        ),
        (
            SkillInput {
                supersedes: Some("n".into()),
                ..skill("n", "", "", &[], "")
            },
            "supersedes: must differ from name",
        ),
    ];
    for (input, message) in cases {
        assert_eq!(input.validate().unwrap_err().to_string(), message);
    }
    let g = graph();
    for bad in [0, 101, -1] {
        let err = g
            .find_skills(&SkillQuery {
                max_results: Some(bad),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("max_results: must be between 1 and 100 (got {bad})")
        );
    }
}
