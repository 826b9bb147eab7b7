//! Skills end to end on a graph: ingest, find by task/persona/url (best first), supersede,
//! outcomes and the degraded flag, listing by domain, and bad inputs.

use car_memory::{Graph, MemoryError, Outcome, SkillInput, SkillQuery};

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

#[test]
fn find_by_task_persona_and_url_best_first() {
    let g = graph();
    // Equal task scores tie-break on successes, then name.
    let q = SkillQuery {
        task: Some("Logins".into()),
        ..Default::default()
    };
    let rows = g.find_skills(&q).unwrap();
    assert_eq!(names(&rows), ["generic-login", "github-login"], "{rows:?}");
    let q = SkillQuery {
        task: Some("signing in".into()),
        ..Default::default()
    };
    assert_eq!(
        names(&g.find_skills(&q).unwrap()),
        ["github-login"],
        "keywords match by stem"
    );
    let q = SkillQuery {
        task: Some("passkeys".into()),
        ..Default::default()
    };
    let rows = g.find_skills(&q).unwrap();
    assert_eq!(names(&rows), ["github-login"]);
    assert_eq!(
        rows[0].match_score, 0.5,
        "a description-only match counts half"
    );

    let q = SkillQuery {
        task: Some("login".into()),
        url: Some("https://github.com/settings".into()),
        persona: Some("Developer".into()),
        max_results: None,
    };
    let rows = g.find_skills(&q).unwrap();
    assert_eq!(names(&rows), ["github-login", "generic-login"]);
    assert!(rows[0].match_score > rows[1].match_score);
    assert!(rows
        .iter()
        .all(|r| (0.0..=1.0).contains(&r.match_score) && !r.code.is_empty()));

    let q = SkillQuery {
        url: Some("https://github.com/acme/app/pull/7".into()),
        ..Default::default()
    };
    let rows = g.find_skills(&q).unwrap();
    assert_eq!(
        names(&rows)[0],
        "github-pr-review",
        "the more specific pattern wins"
    );
    assert!(!names(&rows).contains(&"jira-ticket"));

    let q = SkillQuery {
        persona: Some("manager".into()),
        url: Some("https://acme.atlassian.net/browse/X-1".into()),
        ..Default::default()
    };
    assert_eq!(
        names(&g.find_skills(&q).unwrap()),
        ["jira-ticket", "generic-login"]
    );

    let q = SkillQuery {
        task: Some("bake bread".into()),
        ..Default::default()
    };
    assert!(g.find_skills(&q).unwrap().is_empty());

    let q = SkillQuery {
        max_results: Some(1),
        ..Default::default()
    };
    assert_eq!(g.find_skills(&q).unwrap().len(), 1);
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
    let rows = g
        .find_skills(&SkillQuery {
            task: Some("login".into()),
            ..Default::default()
        })
        .unwrap();
    assert!(!names(&rows).contains(&"github-login"));
    assert!(names(&rows).contains(&"github-login-v2"));
    assert_eq!(
        g.skill("github-login").unwrap().superseded_by.as_deref(),
        Some("github-login-v2")
    );

    let mut bad = skill("x", "", "", &[], "");
    bad.supersedes = Some("nope".into());
    let err = g.ingest_skill(bad.validate().unwrap()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "supersedes names an unknown skill \"nope\""
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
    for expected_fails in 1..=4 {
        let r = g.report_outcome("jira-ticket", Outcome::Fail).unwrap();
        assert_eq!((r.fail_count, r.degraded), (expected_fails, false));
    }
    let r = g.report_outcome("jira-ticket", Outcome::Fail).unwrap();
    assert!(r.degraded, "five outcomes, all failures");
    let q = SkillQuery {
        persona: Some("manager".into()),
        ..Default::default()
    };
    let row = g
        .find_skills(&q)
        .unwrap()
        .into_iter()
        .find(|r| r.name == "jira-ticket")
        .unwrap();
    assert!(
        row.degraded && row.match_score == 0.5,
        "degraded halves the score: {row:?}"
    );
    let mut last = r;
    for _ in 0..7 {
        last = g.report_outcome("jira-ticket", Outcome::Success).unwrap();
    }
    assert_eq!(
        (last.success_count, last.fail_count, last.degraded),
        (7, 5, false)
    );
    let err = g.report_outcome("missing", Outcome::Success).unwrap_err();
    assert!(matches!(err, MemoryError::SkillNotFound { .. }));
    assert_eq!(err.to_string(), "name names an unknown skill \"missing\"");
    assert_eq!(
        "broken".parse::<Outcome>().unwrap_err().to_string(),
        "outcome must be success or fail (got \"broken\")"
    );
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
        (skill("", "", "", &[], ""), "name must not be empty"),
        (
            SkillInput {
                code: " ".into(),
                ..skill("n", "", "", &[], "")
            },
            "code must not be empty",
        ),
        (
            skill("n", "", "", &["ok", ""], ""),
            "task_keywords entries must not be empty",
        ),
        (
            SkillInput {
                supersedes: Some("n".into()),
                ..skill("n", "", "", &[], "")
            },
            "supersedes must differ from name",
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
            format!("max_results must be between 1 and 100 (got {bad})")
        );
    }
}
