//! The pages with `[[environments]]`, over real HTTP on both stores: the
//! waiting page filtered by environment and cluster (in the store's query,
//! paged, counted), unknown and hostile names refused without being echoed,
//! and the gate page's path through the environments with a link to each
//! cluster's gate. Three clusters with their own tokens, as
//! tests/environments.rs sets them up, and the manual clock.

use std::sync::Arc;

use gatebot::testing::clock::ManualClock;
use gatebot_testkit::chatops::{ChatOps, Setup};
use gatebot_testkit::flagger::{
    flagger_tokens, with_token, FlaggerSim, Hook, HookType, Phase, Strategy,
};
use gatebot_testkit::harness::{client, Backend};
use serde_json::json;

/// 2024-05-01T14:02:00Z
const NOW: i64 = 1_714_572_120_000;
const MINUTE: i64 = 60_000;
const COMMIT: &str = "85d557f0c3b1e2a4d6f8091a2b3c4d5e6f708192";

const STAGING: (&str, &str) = ("staging-eu", "token-of-staging-eu");
const PROD_EU: (&str, &str) = ("prod-eu", "token-of-prod-eu");
const PROD_US: (&str, &str) = ("prod-us", "token-of-prod-us");

/// The first block of a document that starts with `fence`.
fn block<'a>(doc: &'a str, fence: &str) -> &'a str {
    let start = doc.find(fence).expect("the block") + fence.len();
    &doc[start..start + doc[start..].find("```").expect("its end")]
}

/// docs/environments.md's policy.
fn policy() -> String {
    block(include_str!("../docs/environments.md"), "```toml\n").to_string()
}

struct Env {
    chat: ChatOps,
    clock: Arc<ManualClock>,
}

impl std::ops::Deref for Env {
    type Target = ChatOps;
    fn deref(&self) -> &ChatOps {
        &self.chat
    }
}

async fn env(backend: Backend, policy: &str) -> Env {
    let clock = ManualClock::new(NOW);
    let setup = Setup {
        policy,
        permissions: &[("alice", "write")],
        clock: Some(clock.clone()),
    };
    let chat = ChatOps::start_with(backend, setup, |config| {
        config.flagger_tokens = flagger_tokens(&[STAGING, PROD_EU, PROD_US]).into();
    })
    .await;
    Env { chat, clock }
}

/// A page: its status, its headers and its text (minijinja writes `/` as
/// `&#x2f;`; read back as the text it is).
async fn get(env: &Env, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let r = client().get(env.server.at(path)).send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    let text = r.text().await.unwrap().replace("&#x2f;", "/");
    (status, headers, text)
}

/// A page that must be there.
async fn page(env: &Env, path: &str) -> String {
    let (status, _, text) = get(env, path).await;
    assert_eq!(status, 200, "{path}: {text}");
    text
}

/// The gates of the waiting page's rows, in their order.
fn rows(page: &str) -> Vec<String> {
    page.split("<tr data-gate=\"")
        .skip(1)
        .map(|r| r[..r.find('"').unwrap()].to_string())
        .collect()
}

/// The waiting page's count of open waits.
fn total(page: &str) -> i64 {
    let at = page.find("id=\"waiting-count\">").expect("a count") + 19;
    page[at..at + page[at..].find('<').unwrap()]
        .parse()
        .unwrap()
}

/// The `rel="next"` link of a page, as a path.
fn next(page: &str) -> Option<String> {
    let end = page.find("\" rel=\"next\"")?;
    let start = page[..end].rfind("href=\"")? + 6;
    Some(page[start..end].replace("&amp;", "&"))
}

/// `canary` of namespace `test` asking at `cluster`'s promote gate of PR 42,
/// waiting for promotion: the answer's status.
async fn ask(env: &Env, (_, token): (&str, &str), canary: &str) -> u16 {
    let body = json!({
        "name": canary, "namespace": "test", "phase": "WaitingPromotion",
        "checksum": format!("rev-{canary}"), "metadata": {"commit": COMMIT},
    });
    let r = client()
        .post(env.server.at(&format!("/gates/t/{token}/promote/pr/42")))
        .json(&body)
        .send()
        .await
        .unwrap();
    r.status().as_u16()
}

const KEY: &str = "/gates/promote/acme/shop/pr/42";

fn at(cluster: &str) -> String {
    format!("{KEY}@{cluster}")
}

gatebot_testkit::on_both_stores!(
    the_waiting_page_keeps_one_environment_or_one_cluster,
    unknown_and_hostile_names_are_refused_and_change_nothing,
    a_filtered_page_pages_and_counts_its_own_waits,
    the_gate_page_shows_the_path_through_the_environments,
    without_environments_the_pages_are_as_before,
);

async fn the_waiting_page_keeps_one_environment_or_one_cluster(backend: Backend) {
    let env = env(backend, &policy()).await;
    for cluster in [STAGING, PROD_EU, PROD_US] {
        assert_eq!(ask(&env, cluster, "podinfo").await, 403);
    }

    let (status, headers, all) = get(&env, "/ui").await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(
        rows(&all),
        [at("prod-us"), at("prod-eu"), at("staging-eu")],
        "{all}"
    );
    assert_eq!(total(&all), 3);
    // The filter bar: links only, no script or style of its own, the CSP as ever.
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("style-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let bar = &all[all.find("<nav class=\"filters\"").expect("a filter bar")..];
    let bar = &bar[..bar.find("</nav>").unwrap()];
    for link in [
        "href=\"/ui\" aria-current=\"page\">All</a>",
        "href=\"/ui?env=staging\">staging</a>",
        "href=\"/ui?cluster=staging-eu\">staging-eu</a>",
        "href=\"/ui?env=production\">production</a>",
        "href=\"/ui?cluster=prod-eu\">prod-eu</a>",
        "href=\"/ui?cluster=prod-us\">prod-us</a>",
    ] {
        assert!(bar.contains(link), "{link} in {bar}");
    }
    assert!(
        !all.contains("<script>") && !all.contains(" style="),
        "{all}"
    );
    // Each row says its cluster.
    assert!(all.contains("<th scope=\"col\">Cluster</th>"), "{all}");
    for cluster in ["staging-eu", "prod-eu", "prod-us"] {
        assert!(
            all.contains(&format!(
                "<td data-label=\"Cluster\"><span class=\"cluster\">{cluster}</span></td>"
            )),
            "{cluster} in {all}"
        );
    }

    let production = page(&env, "/ui?env=production").await;
    assert_eq!(rows(&production), [at("prod-us"), at("prod-eu")]);
    assert_eq!(total(&production), 2);
    assert!(
        production.contains("href=\"/ui?env=production\" aria-current=\"page\">production</a>"),
        "{production}"
    );
    assert!(
        production.contains("<span class=\"scope\" id=\"waiting-scope\">production</span>"),
        "{production}"
    );

    let eu = page(&env, "/ui?cluster=prod-eu").await;
    assert_eq!(rows(&eu), [at("prod-eu")]);
    assert_eq!(total(&eu), 1);
    assert!(
        eu.contains("href=\"/ui?cluster=prod-eu\" aria-current=\"page\">prod-eu</a>"),
        "{eu}"
    );
    // docs/environments.md's hub section points at a remote cluster's list.
    let us = page(&env, "/ui?cluster=prod-us").await;
    assert!(
        us.contains("href=\"/ui?cluster=prod-us\" aria-current=\"page\">prod-us</a>"),
        "{us}"
    );

    let staging = page(&env, "/ui?env=staging").await;
    assert_eq!(rows(&staging), [at("staging-eu")]);
    assert_eq!(total(&staging), 1);

    let us = page(&env, "/ui?env=production&cluster=prod-us").await;
    assert_eq!(rows(&us), [at("prod-us")]);

    // An empty value is no filter, as the audit page's fields.
    assert_eq!(rows(&page(&env, "/ui?env=&cluster=").await).len(), 3);
}

async fn unknown_and_hostile_names_are_refused_and_change_nothing(backend: Backend) {
    let env = env(backend, &policy()).await;
    assert_eq!(ask(&env, PROD_EU, "podinfo").await, 403);
    let before = page(&env, "/ui").await;
    let audit = env.server.api("/api/v1/audit").await;

    let refusals = [
        (
            "/ui?env=qa",
            "env: `qa` is no environment of the policy (staging, production)",
        ),
        (
            "/ui?cluster=staging",
            "cluster: `staging` is no cluster of the policy (staging-eu, prod-eu, prod-us)",
        ),
        (
            "/ui?env=staging&cluster=prod-eu",
            "cluster: `prod-eu` is not in staging (staging-eu)",
        ),
        (
            "/ui?cluster=%3Cscript%3Ealert(1)%3C/script%3E",
            "cluster: not a name of the policy (a DNS label: a-z, 0-9 and -); the clusters are staging-eu, prod-eu, prod-us",
        ),
        (
            "/ui?env=prod%22eu",
            "env: not a name of the policy (a DNS label: a-z, 0-9 and -); the environments are staging, production",
        ),
        (
            "/ui?env=Production&before=5",
            "env: not a name of the policy (a DNS label: a-z, 0-9 and -); the environments are staging, production",
        ),
    ];
    for (path, reason) in refusals {
        let (status, _, text) = get(&env, path).await;
        assert_eq!(status, 400, "{path}: {text}");
        assert!(text.contains(reason), "{path}: {reason} in {text}");
        // A hostile name is neither run nor shown, not even escaped.
        for echo in [
            "<script>",
            "&lt;script",
            "alert(1)",
            "prod\"eu",
            "prod&quot;eu",
        ] {
            assert!(!text.contains(echo), "{path}: {echo} in {text}");
        }
    }

    // Nothing changed: the same rows, the same count, no audit entry.
    let after = page(&env, "/ui").await;
    assert_eq!(rows(&after), rows(&before));
    assert_eq!(total(&after), total(&before));
    assert_eq!(env.server.api("/api/v1/audit").await, audit);
    assert_eq!(
        env.server
            .api(&format!("/api/v1/gates{}", &at("prod-eu")[6..]))
            .await["state"],
        "closed"
    );
}

async fn a_filtered_page_pages_and_counts_its_own_waits(backend: Backend) {
    let env = env(backend, &policy()).await;
    // 60 canaries wait in prod-eu and 60 in prod-us, interleaved, and 5 in staging.
    for n in 0..60 {
        let canary = format!("app-{n:02}");
        assert_eq!(ask(&env, PROD_EU, &canary).await, 403);
        assert_eq!(ask(&env, PROD_US, &canary).await, 403);
        if n % 12 == 0 {
            assert_eq!(ask(&env, STAGING, &canary).await, 403);
        }
    }
    assert_eq!(total(&page(&env, "/ui").await), 125);

    // One cluster: 50, then 10, each the newest first, all of prod-eu.
    let first = page(&env, "/ui?cluster=prod-eu").await;
    assert_eq!(total(&first), 60);
    let gates = rows(&first);
    assert_eq!(gates.len(), 50);
    assert!(gates.iter().all(|g| *g == at("prod-eu")), "{gates:?}");
    assert!(first.contains("<span class=\"canary\">test/app-59</span>"));
    let more = next(&first).expect("a next page");
    assert!(
        more.starts_with("/ui?cluster=prod-eu&before="),
        "the filter is carried: {more}"
    );
    let second = page(&env, &more).await;
    assert_eq!(
        total(&second),
        60,
        "the count is the filter's, not the page's"
    );
    let gates = rows(&second);
    assert_eq!(gates.len(), 10);
    assert!(gates.iter().all(|g| *g == at("prod-eu")), "{gates:?}");
    assert!(second.contains("<span class=\"canary\">test/app-00</span>"));
    assert!(!second.contains("<span class=\"canary\">test/app-10</span>"));
    assert!(next(&second).is_none(), "{second}");
    assert!(
        second.contains("<a href=\"/ui?cluster=prod-eu\">Newest</a>"),
        "{second}"
    );

    // An environment of two clusters: 50, 50, 20; every wait once, none of staging.
    let mut seen = Vec::new();
    let mut path = Some("/ui?env=production".to_string());
    let mut pages = 0;
    while let Some(p) = path {
        let text = page(&env, &p).await;
        assert_eq!(total(&text), 120);
        let canaries: Vec<String> = text
            .split("<tr data-gate=\"")
            .skip(1)
            .map(|r| {
                let gate = &r[..r.find('"').unwrap()];
                let c = &r[r.find("<span class=\"canary\">").unwrap() + 21..];
                format!("{}{gate}", &c[..c.find('<').unwrap()])
            })
            .collect();
        assert!(
            canaries.iter().all(|c| !c.ends_with("@staging-eu")),
            "{canaries:?}"
        );
        seen.extend(canaries);
        pages += 1;
        path = next(&text);
        if let Some(p) = &path {
            assert!(p.starts_with("/ui?env=production&before="), "{p}");
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 120);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 120, "no wait twice");

    // staging's own page: its five, on one page.
    let staging = page(&env, "/ui?env=staging").await;
    assert_eq!(total(&staging), 5);
    assert_eq!(rows(&staging).len(), 5);
    assert!(next(&staging).is_none());
}

/// PR 42's canary in one cluster, waiting for promotion of `revision`.
async fn waiting(env: &Env, (_, token): (&str, &str), revision: &str) -> FlaggerSim {
    let base = &env.server.url;
    let gate = |name: &str, t: HookType, kind: &str| {
        Hook::new(name, t, format!("{base}/gates/{kind}/pr/42")).with_metadata("commit", COMMIT)
    };
    let hooks = vec![
        gate("promote-gate", HookType::ConfirmPromotion, "promote"),
        gate("rollback-gate", HookType::Rollback, "rollback"),
    ];
    let mut sim = FlaggerSim::new(
        "podinfo",
        "test",
        Strategy::Canary {
            step_weight: 50,
            max_weight: 50,
        },
        with_token(hooks, token),
    );
    sim.tick().await;
    sim.deploy(revision);
    assert!(
        sim.run_until(|s| s.phase() == Phase::WaitingPromotion, 10)
            .await
    );
    env.server.drained().await;
    sim
}

/// The rows of the gate page's path: (environment, cluster link, state,
/// here, where it stands).
fn path(page: &str) -> Vec<(String, String, String, bool, String)> {
    let table = &page[page
        .find("<table class=\"rows\" id=\"path\">")
        .expect("a path")..];
    let table = &table[..table.find("</table>").unwrap()];
    let cell = |row: &str, label: &str| {
        let open = format!("<td data-label=\"{label}\">");
        let at = row.find(&open).unwrap() + open.len();
        row[at..at + row[at..].find("</td>").unwrap()].to_string()
    };
    table
        .split("<tr data-cluster=")
        .skip(1)
        .map(|row| {
            (
                cell(row, "Environment"),
                cell(row, "Cluster"),
                cell(row, "State"),
                row.contains("aria-current=\"location\""),
                cell(row, "Where it stands"),
            )
        })
        .collect()
}

async fn the_gate_page_shows_the_path_through_the_environments(backend: Backend) {
    let env = env(backend, &policy()).await;
    let mut staging = waiting(&env, STAGING, "rev-s1").await;
    env.comment_by(42, "bob", 100, "alice", "/promote staging")
        .await;
    assert!(
        staging
            .run_until(|s| s.phase() == Phase::Succeeded, 6)
            .await
    );
    env.server.drained().await;
    env.clock.advance(5 * MINUTE);
    let _eu = waiting(&env, PROD_EU, "rev-e1").await;

    let eu = page(&env, "/ui/gates/promote/acme/shop/pr/42@prod-eu").await;
    assert!(eu.contains("<h2 id=\"h-path\">Path through the environments</h2>"));
    let link = |c: &str| format!("<a href=\"/ui/gates/promote/acme/shop/pr/42@{c}\">{c}</a>");
    let state = |s: &str| {
        format!(
            "<span class=\"state state-{}\">{s}</span>",
            s.replace(' ', "-")
        )
    };
    assert_eq!(
        path(&eu),
        [
            (
                "staging".into(),
                link("staging-eu"),
                state("open"),
                false,
                String::new()
            ),
            (
                "production".into(),
                format!("{} <span class=\"muted\">(this gate)</span>", link("prod-eu")),
                state("waiting"),
                true,
                "waiting: staging promoted 85d557f 5 min ago; production may go at 2024-05-01T14:32:00Z (soak 30 min)".into()
            ),
            (
                "production".into(),
                link("prod-us"),
                state("not started"),
                false,
                String::new()
            ),
        ],
        "{eu}"
    );

    // Each link is that cluster's own gate page, with its own row marked.
    let us = page(&env, "/ui/gates/promote/acme/shop/pr/42@prod-us").await;
    let rows = path(&us);
    assert_eq!(rows.len(), 3);
    assert!(rows[2].3 && !rows[1].3 && !rows[0].3, "{rows:?}");
    assert_eq!(rows[1].2, state("waiting"));
    let st = page(&env, "/ui/gates/promote/acme/shop/pr/42@staging-eu").await;
    assert!(path(&st)[0].3, "{st}");

    // The PR's page lists each cluster's gate, staging first, with its cluster.
    let pr = page(&env, "/ui/prs/acme/shop/42").await;
    let staging_row = pr
        .find("<a href=\"/ui/gates/promote/acme/shop/pr/42@staging-eu\">promote</a> <span class=\"cluster\">staging · staging-eu</span>")
        .unwrap_or_else(|| panic!("{pr}"));
    let eu_row = pr
        .find("<a href=\"/ui/gates/promote/acme/shop/pr/42@prod-eu\">promote</a> <span class=\"cluster\">production · prod-eu</span>")
        .unwrap_or_else(|| panic!("{pr}"));
    assert!(staging_row < eu_row, "{pr}");
}

async fn without_environments_the_pages_are_as_before(backend: Backend) {
    let env = env(backend, "").await;
    assert_eq!(ask(&env, PROD_EU, "podinfo").await, 403);
    let all = page(&env, "/ui").await;
    assert_eq!(rows(&all), [KEY]);
    assert!(!all.contains("class=\"filters\""), "{all}");
    assert!(!all.contains("Cluster"), "{all}");
    let (status, _, text) = get(&env, "/ui?env=production").await;
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("the policy has no [[environments]]"),
        "{text}"
    );
    let gate = page(&env, "/ui/gates/promote/acme/shop/pr/42").await;
    assert!(!gate.contains("id=\"path\""), "{gate}");
    let pr = page(&env, "/ui/prs/acme/shop/42").await;
    assert!(
        pr.contains("<a href=\"/ui/gates/promote/acme/shop/pr/42\">promote</a></td>"),
        "{pr}"
    );
}

/// Every page docs/environments.md and docs/web.md show for environments is
/// one these tests fetch, and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_pages_answer() {
    let env = env(Backend::Sqlite, &policy()).await;
    assert_eq!(ask(&env, PROD_EU, "podinfo").await, 403);
    // Every page of docs/environments.md; those of docs/web.md about environments.
    let docs = [
        (include_str!("../docs/environments.md"), false),
        (include_str!("../docs/web.md"), true),
    ];
    let mut shown = Vec::new();
    for (doc, only_environments) in docs {
        for part in doc.split('`').skip(1).step_by(2) {
            let of_environments = ["env=", "cluster=", "@"].iter().any(|w| part.contains(w));
            if part.starts_with("/ui") && (of_environments || !only_environments) {
                shown.push(part.to_string());
            }
        }
    }
    shown.sort();
    shown.dedup();
    assert!(shown.len() >= 3, "{shown:?}");
    let fetched = include_str!("web_environments.rs");
    for url in &shown {
        assert!(
            fetched.contains(&format!("\"{url}\"")),
            "{url} is not one the tests fetch"
        );
        page(&env, url).await;
    }
}
