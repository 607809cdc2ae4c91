//! What a command does: the gates it changes, the policy rule that governs
//! it, what a button's Reject means, and applying it. Shared by every intake
//! through `dispatch`.

use super::freezes::{freeze_in, unfreeze_in};
use super::named::{create_in, retire_in, Named};
use super::unit::Unit;
use super::{CommandError, Engine, GateSummary, Provenance};
pub use crate::command::Rule;
use crate::command::{freeze_reason, Command, Invalid, Target, Verb};
use crate::gate::environment::Environments;
use crate::gate::freeze::Freeze;
use crate::gate::reason::{self, ReasonKind, ReasonRule};
use crate::gate::{
    CanaryRef, Gate, GateKey, GateKind, GateName, GateStatus, Namespace, Phase, PrNumber, RepoName,
    Scope, Source,
};

/// What a command is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The gates of every kind of one scope: a PR, a canary, a namespace's
    /// canaries, or the gates a pipeline created by one name.
    Of(Scope),
    /// One gate named in full.
    Gate(GateKey),
    /// No gate: a freeze names its own scope.
    Nothing,
}

impl Subject {
    /// The gates of a pull request.
    pub fn pr(repo: RepoName, number: PrNumber) -> Self {
        Self::Of(Scope::Pr { repo, number })
    }

    fn scope(&self) -> Option<Scope> {
        match self {
            Self::Of(scope) => Some(scope.clone()),
            Self::Gate(key) => Some(key.scope.clone()),
            Self::Nothing => None,
        }
    }

    /// How people name it: `acme/shop#42`.
    pub fn display(&self) -> String {
        match (self, self.scope()) {
            (Self::Gate(key), _) => key.to_string(),
            (_, Some(scope)) => GateKey::new(GateKind::Start, scope).subject(),
            (_, None) => "no gate".to_string(),
        }
    }

    /// The gates of `kinds` it names.
    fn gates(&self, kinds: &[GateKind]) -> Vec<GateKey> {
        if let Self::Gate(key) = self {
            return vec![key.clone()];
        }
        let Some(scope) = self.scope() else {
            return Vec::new();
        };
        kinds
            .iter()
            .map(|k| GateKey::new(*k, scope.clone()))
            .collect()
    }
}

/// What a command does, decided before anyone is asked whether they may.
#[derive(Debug, Clone)]
pub struct Plan {
    pub rule: Rule,
    /// The gates it changes (none for freezes, status and help).
    pub keys: Vec<GateKey>,
    pub act: Act,
}

/// The change a plan makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Open,
    Close,
    Hold,
    Unhold,
    Freeze,
    Unfreeze,
    Create,
    Retire,
    /// Status and help: an answer, no change.
    Answer,
}

/// The gates a command word changes.
pub fn gates_for(verb: Verb, subject: &Subject) -> Vec<GateKey> {
    match verb {
        // A hold stops progress; it never stands in the way of a rollback.
        Verb::Hold | Verb::Unhold => {
            subject.gates(&[GateKind::Start, GateKind::Promote, GateKind::Traffic])
        }
        other => match other.kind_opened() {
            Some(kind) => subject.gates(&[kind]),
            None => subject.gates(&[]),
        },
    }
}

/// What a button's Reject at `key` means, wherever it is pressed: at a
/// promotion or a traffic step (and a loadtester's gate while its canary
/// progresses) it rolls the canary back by opening the rollback gate of the
/// same scope; anywhere else it keeps the gate closed.
pub fn rollback_of(key: &GateKey, phase: &Phase) -> Option<GateKey> {
    let progressing = phase.progressing();
    match key.kind {
        GateKind::Promote | GateKind::Traffic => Some(key.sibling(GateKind::Rollback)),
        GateKind::LegacyGate if progressing => Some(key.sibling(GateKind::LegacyRollback)),
        _ => None,
    }
}

/// The plan of `command` about `subject`; `phase` is Flagger's phase at a
/// rejected gate. Break glass and a freeze's reason are checked here, for
/// every intake alike.
pub fn plan(command: &Command, subject: &Subject, phase: &Phase) -> Result<Plan, Invalid> {
    let plan = |rule, keys, act| Ok(Plan { rule, keys, act });
    match command {
        Command::Open {
            kind,
            reason,
            force,
        } => {
            let verb = Verb::opening(*kind);
            let keys = subject.gates(&[*kind]);
            if !force {
                return plan(Rule::Verb(verb), keys, Act::Open);
            }
            if kind.is_rollback() {
                return Err(Invalid::ForceOpensNothing(verb));
            }
            if reason.is_none() {
                return Err(Invalid::ForceWithoutReason(verb));
            }
            plan(Rule::Force, keys, Act::Open)
        }
        Command::Reject { .. } => {
            let Subject::Gate(key) = subject else {
                return Err(Invalid::RejectWithoutGate);
            };
            match rollback_of(key, phase) {
                Some(rollback) => plan(Rule::Verb(Verb::Rollback), vec![rollback], Act::Open),
                None => plan(
                    Rule::Verb(Verb::opening(key.kind)),
                    vec![key.clone()],
                    Act::Close,
                ),
            }
        }
        Command::Close { .. } => plan(Rule::Close, gates_for(Verb::Hold, subject), Act::Close),
        Command::Hold { .. } => plan(
            Rule::Verb(Verb::Hold),
            gates_for(Verb::Hold, subject),
            Act::Hold,
        ),
        Command::Unhold { .. } => plan(
            Rule::Verb(Verb::Unhold),
            gates_for(Verb::Unhold, subject),
            Act::Unhold,
        ),
        Command::Freeze { reason, .. } => {
            freeze_reason(reason)?;
            plan(Rule::Freeze, Vec::new(), Act::Freeze)
        }
        Command::Unfreeze { .. } => plan(Rule::Unfreeze, Vec::new(), Act::Unfreeze),
        Command::Create { .. } => plan(Rule::Named, subject.gates(&[]), Act::Create),
        Command::Retire { .. } => plan(Rule::Named, subject.gates(&[]), Act::Retire),
        Command::Status => plan(Rule::Verb(Verb::Status), Vec::new(), Act::Answer),
        Command::Help => plan(Rule::Verb(Verb::Help), Vec::new(), Act::Answer),
    }
}

/// `/promote production --force <why>`: break glass named after the
/// environment, read as `/promote --force production <why>`, the words kept
/// as written but the flag. Only an environment or cluster of the policy may
/// stand before the flag, and one that holds the cluster of a gate named
/// with its own (`at`): after any other word `--force` is part of the
/// reason, and breaks no glass.
pub(super) fn forced_after_place(
    envs: &Environments,
    command: &Command,
    at: Option<&crate::gate::ClusterName>,
) -> Option<Command> {
    let Command::Open {
        kind,
        reason: Some(text),
        force: false,
    } = command
    else {
        return None;
    };
    let (place, after) = text.trim().split_once(char::is_whitespace)?;
    let rest = crate::command::after_force(after.trim_start())?;
    let target = envs.target_of_word(place)?;
    if at.is_some_and(|c| !envs.clusters_of(&target).contains(c)) {
        return None;
    }
    Some(Command::Open {
        kind: *kind,
        reason: Some(format!("{place} {rest}").trim_end().to_string()),
        force: true,
    })
}

/// Checks `plan`'s reason once its gates are placed in their environments:
/// no reason is longer than its cap, and a command the policy's
/// `[[reasons]]` name says why, besides the environment it names.
pub(super) fn check_reason(
    rules: &[ReasonRule],
    envs: &Environments,
    plan: &Plan,
    command: &Command,
) -> Result<(), Invalid> {
    let text = command.reason();
    if text.is_some_and(|t| !reason::fits(t)) {
        return Err(Invalid::ReasonTooLong);
    }
    let Some(kind) = reason_kind(command, plan) else {
        return Ok(());
    };
    let Some(place) = plan
        .keys
        .iter()
        .map(|key| environment_of(envs, key))
        .find(|env| reason::required(rules, kind, env.as_deref()))
    else {
        return Ok(());
    };
    let is_place = |word: &str| envs.target_of_word(word).is_some();
    match (reason::given(text, is_place), kind) {
        (Some(_), _) => Ok(()),
        (None, ReasonKind::Force) => Err(Invalid::ForceWithoutReason(Verb::opening(
            plan.keys.first().map_or(GateKind::Promote, |k| k.kind),
        ))),
        (None, _) => Err(Invalid::ReasonRequired {
            verb: kind.to_string(),
            place,
        }),
    }
}

/// The `[[environments]]` entry a gate is in, by its cluster.
pub(super) fn environment_of(envs: &Environments, key: &GateKey) -> Option<String> {
    let env = key.cluster.as_ref().and_then(|c| envs.of_cluster(c));
    env.map(|e| e.name.to_string())
}

/// What a `[[reasons]]` rule calls `command`; break glass always needs one.
fn reason_kind(command: &Command, plan: &Plan) -> Option<ReasonKind> {
    match command {
        Command::Open { force: true, .. } => Some(ReasonKind::Force),
        Command::Open { kind, .. } => Some(match Verb::opening(*kind) {
            Verb::Start => ReasonKind::Start,
            Verb::Promote => ReasonKind::Promote,
            Verb::Traffic => ReasonKind::Traffic,
            _ => ReasonKind::Rollback,
        }),
        Command::Reject { .. } if plan.act == Act::Open => Some(ReasonKind::Rollback),
        Command::Hold { .. } => Some(ReasonKind::Hold),
        _ => None,
    }
}

/// What came of an applied command.
#[derive(Debug, Clone)]
pub struct Applied {
    pub act: Act,
    /// The gates after the change.
    pub gates: Vec<Gate>,
    /// The freeze made.
    pub froze: Option<Freeze>,
    /// The freezes lifted.
    pub lifted: Vec<Freeze>,
    /// The named gate created or retired.
    pub named: Option<Box<Named>>,
}

impl Applied {
    /// One line for a reply: "opened /gates/promote/acme/shop/pr/42".
    pub fn summary(&self) -> String {
        let verb = match self.act {
            Act::Hold => "held",
            Act::Unhold => "released",
            Act::Close => "closed",
            Act::Create => "created",
            Act::Retire => "retired",
            _ => "opened",
        };
        let mut keys: Vec<String> = Vec::new();
        let mut counted: Vec<String> = Vec::new();
        for g in &self.gates {
            match &g.status {
                GateStatus::Approving(t) => counted.push(format!("{} ({})", g.key, t.summary())),
                _ => keys.push(g.key.to_string()),
            }
        }
        match (keys.is_empty(), counted.is_empty()) {
            (_, true) => format!("{verb} {}", keys.join(", ")),
            (true, false) => format!("approval counted at {}", counted.join(", ")),
            (false, false) => format!(
                "{verb} {}; approval counted at {}",
                keys.join(", "),
                counted.join(", ")
            ),
        }
    }

    /// Whether an approval only counted towards a quorum somewhere.
    pub fn counted_only(&self) -> bool {
        self.gates
            .iter()
            .any(|g| matches!(g.status, GateStatus::Approving(_)))
    }
}

/// The reason written with the change: the person's, or for a Reject that
/// gave none, where and what was rejected.
fn reason_of(command: &Command, act: Act, who: &Provenance) -> Option<String> {
    let said = said_of(command, act, who);
    let said = match (&who.ticket, said) {
        (Some(ticket), Some(said)) => Some(format!("{said}; {}", ticket.describe())),
        (Some(ticket), None) => Some(ticket.describe()),
        (None, said) => said,
    };
    reason::with_claim(who.claim.as_deref(), said)
}

/// The reason as the person gave it, or as the change explains itself.
fn said_of(command: &Command, act: Act, who: &Provenance) -> Option<String> {
    if let Some(reason) = command.reason() {
        return Some(reason.to_string());
    }
    if !matches!(command, Command::Reject { .. }) {
        return who.reason.clone();
    }
    let place = match who.actor.source {
        Source::Slack => "Slack".to_string(),
        Source::Github => "GitHub".to_string(),
        Source::Web => "the web pages".to_string(),
        other => other.to_string(),
    };
    let revision = who.revision.as_ref().map_or("", |(_, r)| r.as_str());
    Some(match act {
        Act::Open => format!("revision {revision} rejected in {place}"),
        _ => format!(
            "rejected in {place} by {} (revision {revision})",
            who.actor.name
        ),
    })
}

/// Applies a planned command in `unit`. A freeze's change reaches the
/// check's memory once the caller re-reads the freezes after the commit.
pub async fn apply_in(
    unit: &mut Unit<'_>,
    command: &Command,
    plan: &Plan,
    who: &Provenance,
) -> Result<Applied, CommandError> {
    let who = who
        .clone()
        .reason(reason_of(command, plan.act, who))
        .force(command.forced());
    let mut applied = Applied {
        act: plan.act,
        gates: Vec::new(),
        froze: None,
        lifted: Vec::new(),
        named: None,
    };
    match command {
        Command::Freeze {
            scope,
            until,
            reason,
        } => {
            // The plan checked it.
            let reason = reason.trim();
            let delivery = who.delivery.as_ref().map(|d| d.as_str());
            let freeze = freeze_in(unit, scope.clone(), *until, reason, &who.actor, delivery);
            applied.froze = Some(freeze.await?);
        }
        Command::Unfreeze { scope } => {
            applied.lifted = unfreeze_in(unit, scope, &who.actor).await?;
        }
        Command::Create { spec, .. } => {
            for key in &plan.keys {
                applied.named = Some(Box::new(create_in(unit, key, spec, &who).await?));
            }
        }
        Command::Retire { .. } => {
            for key in &plan.keys {
                applied.named = Some(Box::new(retire_in(unit, key, &who).await?));
            }
        }
        _ => {
            for key in &plan.keys {
                applied.gates.push(change(unit, plan.act, key, &who).await?);
            }
        }
    }
    Ok(applied)
}

async fn change(
    unit: &mut Unit<'_>,
    act: Act,
    key: &GateKey,
    who: &Provenance,
) -> Result<Gate, CommandError> {
    match act {
        Act::Open => unit.open(key, who).await,
        Act::Close => unit.close(key, who).await,
        Act::Hold => unit.hold(key, who).await,
        Act::Unhold => unit.unhold(key, who).await,
        Act::Freeze | Act::Unfreeze | Act::Create | Act::Retire | Act::Answer => {
            Ok(unit.gate(key).await?)
        }
    }
}

/// Closes the given kinds of a PR's gates (new commits pushed, PR closed), in
/// one unit. Held gates stay held.
pub async fn close_pr_gates(
    engine: &Engine,
    repo: &RepoName,
    number: PrNumber,
    kinds: &[GateKind],
    who: &Provenance,
) -> Result<Vec<Gate>, CommandError> {
    let mut unit = engine.commands().begin().await?;
    let mut closed = Vec::new();
    let scope = Scope::Pr {
        repo: repo.clone(),
        number,
    };
    let keys = kinds.iter().flat_map(|kind| {
        let key = GateKey::new(*kind, scope.clone());
        engine
            .clusters()
            .placements()
            .into_iter()
            .map(move |c| key.clone().at(c))
    });
    for key in keys {
        // New commits: an approval, or the count towards one, was for what came before.
        if matches!(
            unit.gate(&key).await?.status,
            GateStatus::Open(_) | GateStatus::Approving(_)
        ) {
            closed.push(unit.close(&key, who).await?);
        }
    }
    unit.commit().await?;
    Ok(closed)
}

/// The PR's gates and who waits at them, for `/status`.
pub async fn status(engine: &Engine, subject: &Subject) -> Result<Vec<GateSummary>, CommandError> {
    let placements = engine.clusters().placements();
    let wanted: Vec<String> = subject
        .gates(&GateKind::ROUTABLE)
        .iter()
        .flat_map(|k| match k.cluster {
            Some(_) => vec![k.clone()],
            None => placements.iter().map(|c| k.clone().at(c.clone())).collect(),
        })
        .map(|k| k.to_string())
        .collect();
    Ok(engine
        .reads()
        .list()
        .await?
        .into_iter()
        .filter(|g| wanted.contains(&g.gate))
        .collect())
}

/// Why a slash command's target names no gate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error(
        "`{0}` needs a default repository: write `owner/repo#{0}` or set GATEBOT_GITHUB_REPOSITORY"
    )]
    NoDefaultRepo(u64),
    #[error("{0}")]
    Key(#[from] crate::gate::KeyError),
}

/// What a slash command's target names; `None` when it names nothing.
pub fn subject_of(
    target: Option<Target>,
    default_repo: Option<&RepoName>,
) -> Result<Option<Subject>, TargetError> {
    let Some(target) = target else {
        return Ok(None);
    };
    let subject = match target {
        Target::Pr {
            repo: Some(repo),
            number,
        } => Subject::pr(repo.parse()?, PrNumber(number)),
        Target::Pr { repo: None, number } => Subject::pr(
            default_repo
                .cloned()
                .ok_or(TargetError::NoDefaultRepo(number))?,
            PrNumber(number),
        ),
        Target::Canary { namespace, name } => {
            Subject::Of(Scope::Canary(CanaryRef::new(&namespace, &name)?))
        }
        Target::Namespace(ns) => Subject::Of(Scope::Namespace(Namespace::new(&ns)?)),
        Target::Named(name) => Subject::Of(Scope::Named(GateName::new(&name)?)),
        Target::Gate(path) => Subject::Gate(GateKey::parse(&path, default_repo)?),
    };
    Ok(Some(subject))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr() -> Subject {
        Subject::pr("acme/shop".parse().unwrap(), PrNumber(42))
    }

    #[test]
    fn force_after_a_place_of_the_policy_breaks_glass() {
        use crate::gate::environment::Environment;
        let production = Environment {
            name: "production".parse().unwrap(),
            clusters: vec!["prod-eu".parse().unwrap()],
            after: None,
            soak: std::time::Duration::ZERO,
        };
        let envs = Environments::new(vec![production], None).unwrap();
        let read = |text: &str, envs: &Environments| {
            let command = Command::from_verb(Verb::Promote, Some(text.to_string()));
            match forced_after_place(envs, &command, None) {
                Some(Command::Open {
                    reason,
                    force: true,
                    ..
                }) => Some(reason.unwrap_or_default()),
                _ => None,
            }
        };
        let table = [
            (
                "production --force db is down",
                Some("production db is down"),
            ),
            (
                "Production,  --force db is down",
                Some("Production, db is down"),
            ),
            ("prod-eu --force", Some("prod-eu")),
            ("after --force push of the fix", None),
            ("production --forced landing", None),
            ("production because --force", None),
            ("--force production db is down", None),
            ("production", None),
        ];
        for (text, forced) in table {
            assert_eq!(read(text, &envs).as_deref(), forced, "{text}");
        }
        let none = Environments::default();
        assert_eq!(read("production --force db is down", &none), None);
    }

    #[test]
    fn commands_name_their_gates() {
        let keys = |c| {
            gates_for(c, &pr())
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(Verb::Promote), vec!["/gates/promote/acme/shop/pr/42"]);
        assert_eq!(
            keys(Verb::Rollback),
            vec!["/gates/rollback/acme/shop/pr/42"]
        );
        assert_eq!(keys(Verb::Hold).len(), 3, "a hold never blocks a rollback");
        assert!(keys(Verb::Status).is_empty());
        assert_eq!(pr().display(), "acme/shop#42");
    }

    #[test]
    fn reject_rolls_back_only_where_a_canary_progresses() {
        let scope = Scope::Canary(CanaryRef::new("test", "podinfo").unwrap());
        let promote = GateKey::new(GateKind::Promote, scope.clone());
        let waiting = Phase::parse("Waiting");
        assert_eq!(
            rollback_of(&promote, &waiting).unwrap().to_string(),
            "/gates/rollback/canary/test/podinfo"
        );
        assert!(rollback_of(&GateKey::new(GateKind::Start, scope.clone()), &waiting).is_none());
        let legacy = GateKey::new(GateKind::LegacyGate, scope);
        assert_eq!(
            rollback_of(&legacy, &Phase::WaitingPromotion)
                .unwrap()
                .to_string(),
            "/loadtester/rollback/test/podinfo"
        );
        assert!(rollback_of(&legacy, &waiting).is_none());
        let reject = Command::Reject {
            phase: None,
            reason: None,
        };
        let at = |key: &GateKey| plan(&reject, &Subject::Gate(key.clone()), &waiting).unwrap();
        assert_eq!(at(&promote).rule, Rule::Verb(Verb::Rollback));
        assert_eq!(at(&legacy).act, Act::Close);
        assert_eq!(at(&legacy).rule, Rule::Verb(Verb::Promote));
        assert_eq!(
            plan(&reject, &pr(), &waiting).unwrap_err(),
            Invalid::RejectWithoutGate
        );
    }

    #[test]
    fn break_glass_needs_a_reason_and_an_opening() {
        let forced = |verb, text: &str| {
            plan(
                &Command::from_verb(verb, Some(text.into())),
                &pr(),
                &Phase::None,
            )
        };
        assert_eq!(
            forced(Verb::Promote, "--force prod").unwrap().rule,
            Rule::Force
        );
        assert_eq!(
            forced(Verb::Promote, "--force").unwrap_err(),
            Invalid::ForceWithoutReason(Verb::Promote)
        );
        assert_eq!(
            forced(Verb::Rollback, "--force x").unwrap_err(),
            Invalid::ForceOpensNothing(Verb::Rollback)
        );
    }
}
