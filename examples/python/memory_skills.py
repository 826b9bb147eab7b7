"""Memory and skills: facts, ranked recall, a context block for a prompt, persistence,
and procedural skills with outcome tracking.

Run against a running daemon: `python examples/python/memory_skills.py`.
"""

from __future__ import annotations

import json

from car_runtime import CarRuntime


def main() -> None:
    with CarRuntime(memory_namespace="examples-memory") as rt:
        rt.add_fact("deploys", "never deploy on Fridays", "constraint")
        rt.add_fact("editor", "the team prefers tabs over spaces", "preference")
        rt.add_fact("ci", "the CI machine has two cores", "fact", confidence=0.9, tags=["ci"])
        print("facts:", rt.fact_count())

        for row in json.loads(rt.query_facts("how many cores does CI have", k=2)):
            print(f"  {row['confidence']:.2f} {row['subject']}: {row['body']}")

        context = rt.build_context("can we deploy today?", model_context_window=2048)
        print("context:\n" + context)
        assert "Fridays" in context

        saved = rt.persist_memory("examples-memory-backup.json")
        print("persisted:", saved)

        rt.ingest_skill(
            name="open_login",
            code="page.click('#login')",
            platform="web",
            persona="tester",
            url_pattern="https://app.example/*",
            task_keywords=["login", "sign in"],
            description="open the login form",
        )
        found = rt.find_skill("tester", "https://app.example/home", "sign in")
        best = json.loads(found)[0]
        print("skill:", best["name"], "score", round(best["match_score"], 2))
        print("report:", rt.report_outcome(best["name"], "success"))
        print("skills:", [s["name"] for s in json.loads(rt.list_skills())])
        print("done")


if __name__ == "__main__":
    main()
