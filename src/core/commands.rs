//! What a command does to gates, shared by every place a person can give one
//! (PR comments, Slack buttons, the slash command).

use crate::command::{Command, Target};
use crate::core::unit::Unit;
use crate::core::{Engine, EngineError, GateSummary, Provenance};
use crate::gate::{
    CanaryRef, Gate, GateKey, GateKind, GateName, GateStatus, Namespace, PrNumber, RepoName, Scope,
};

/// What a command is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    Pr {
        repo: RepoName,
        number: PrNumber,
    },
    Canary(CanaryRef),
    /// Every canary of a namespace, at its namespace gates.
    Namespace(Namespace),
    /// The gates a pipeline created by this name.
    Named(GateName),
    /// One gate named in full.
    Gate(GateKey),
}

impl Subject {
    fn scope(&self) -> Scope {
        match self {
            Self::Pr { repo, number } => Scope::Pr {
                repo: repo.clone(),
                number: *number,
            },
            Self::Canary(c) => Scope::Canary(c.clone()),
            Self::Namespace(ns) => Scope::Namespace(ns.clone()),
            Self::Named(name) => Scope::Named(name.clone()),
            Self::Gate(key) => key.scope.clone(),
        }
    }

    /// How people name it: `acme/shop#42`.
    pub fn display(&self) -> String {
        match self {
            Self::Gate(key) => key.to_string(),
            other => GateKey::new(GateKind::Start, other.scope()).subject(),
        }
    }
}

/// The gate kind a command opens, if it opens one.
pub fn kind_opened_by(command: Command) -> Option<GateKind> {
    match command {
        Command::Start => Some(GateKind::Start),
        Command::Promote => Some(GateKind::Promote),
        Command::Traffic => Some(GateKind::Traffic),
        Command::Rollback => Some(GateKind::Rollback),
        _ => None,
    }
}

/// The gates a command changes.
pub fn gates_for(command: Command, subject: &Subject) -> Vec<GateKey> {
    if let Subject::Gate(key) = subject {
        return vec![key.clone()];
    }
    let scope = subject.scope();
    match command {
        // A hold stops progress; it never stands in the way of a rollback.
        Command::Hold | Command::Unhold => [GateKind::Start, GateKind::Promote, GateKind::Traffic]
            .into_iter()
            .map(|k| GateKey::new(k, scope.clone()))
            .collect(),
        other => kind_opened_by(other)
            .map(|k| vec![GateKey::new(k, scope)])
            .unwrap_or_default(),
    }
}

#[derive(Debug, Clone)]
pub struct Applied {
    pub command: Command,
    /// The gates after the change.
    pub gates: Vec<Gate>,
}

impl Applied {
    /// One line for a reply: "opened /gates/promote/acme/shop/pr/42".
    pub fn summary(&self) -> String {
        let verb = match self.command {
            Command::Hold => "held",
            Command::Unhold => "released",
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
}

/// Applies a gate-changing command (`start`, `promote`, `traffic`, `rollback`,
/// `hold`, `unhold`) in one unit of its own, tried again when a gate it
/// changes was locked. `status` and `help` change nothing and return no gates.
pub async fn apply(
    engine: &Engine,
    command: Command,
    subject: &Subject,
    who: &Provenance,
) -> Result<Applied, EngineError> {
    engine
        .retrying(|| apply_once(engine, command, subject, who))
        .await
}

async fn apply_once(
    engine: &Engine,
    command: Command,
    subject: &Subject,
    who: &Provenance,
) -> Result<Applied, EngineError> {
    let mut unit = engine.begin().await?;
    match apply_in(&mut unit, command, subject, who).await {
        Ok(applied) => {
            unit.commit().await?;
            Ok(applied)
        }
        Err(e) => {
            unit.rollback().await;
            Err(e)
        }
    }
}

/// [`apply`] as part of a larger unit (one delivery's commands and replies).
pub async fn apply_in(
    unit: &mut Unit<'_>,
    command: Command,
    subject: &Subject,
    who: &Provenance,
) -> Result<Applied, EngineError> {
    let mut gates = Vec::new();
    for key in gates_for(command, subject) {
        let gate = match command {
            Command::Hold => unit.hold(&key, who).await?,
            Command::Unhold => unit.unhold(&key, who).await?,
            Command::Start | Command::Promote | Command::Traffic | Command::Rollback => {
                unit.open(&key, who).await?
            }
            Command::Status | Command::Help => continue,
        };
        gates.push(gate);
    }
    Ok(Applied { command, gates })
}

/// Closes the given kinds of a PR's gates (new commits pushed, PR closed), in
/// one unit. Held gates stay held.
pub async fn close_pr_gates(
    engine: &Engine,
    repo: &RepoName,
    number: PrNumber,
    kinds: &[GateKind],
    who: &Provenance,
) -> Result<Vec<Gate>, EngineError> {
    let mut unit = engine.begin().await?;
    let mut closed = Vec::new();
    for kind in kinds {
        let key = GateKey::new(
            *kind,
            Scope::Pr {
                repo: repo.clone(),
                number,
            },
        );
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
pub async fn status(engine: &Engine, subject: &Subject) -> Result<Vec<GateSummary>, EngineError> {
    let wanted: Vec<String> = match subject {
        Subject::Gate(key) => vec![key.to_string()],
        other => GateKind::ROUTABLE
            .into_iter()
            .map(|k| GateKey::new(k, other.scope()).to_string())
            .collect(),
    };
    Ok(engine
        .list()
        .await?
        .into_iter()
        .filter(|g| wanted.contains(&g.gate))
        .collect())
}

/// What a slash command's target names; `None` when it names nothing.
pub fn subject_of(
    target: Option<Target>,
    default_repo: Option<&RepoName>,
) -> Result<Option<Subject>, String> {
    let Some(target) = target else {
        return Ok(None);
    };
    let subject = match target {
        Target::Pr {
            repo: Some(repo),
            number,
        } => Subject::Pr {
            repo: repo.parse().map_err(|e: crate::gate::KeyError| e.to_string())?,
            number: PrNumber(number),
        },
        Target::Pr { repo: None, number } => Subject::Pr {
            repo: default_repo.cloned().ok_or_else(|| {
                format!("`{number}` needs a default repository: write `owner/repo#{number}` or set GATEBOT_GITHUB_REPOSITORY")
            })?,
            number: PrNumber(number),
        },
        Target::Canary { namespace, name } => {
            Subject::Canary(CanaryRef::new(&namespace, &name).map_err(|e| e.to_string())?)
        }
        Target::Namespace(ns) => {
            Subject::Namespace(Namespace::new(&ns).map_err(|e| e.to_string())?)
        }
        Target::Named(name) => Subject::Named(GateName::new(&name).map_err(|e| e.to_string())?),
        Target::Gate(path) => {
            Subject::Gate(GateKey::parse(&path, default_repo).map_err(|e| e.to_string())?)
        }
    };
    Ok(Some(subject))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr() -> Subject {
        Subject::Pr {
            repo: "acme/shop".parse().unwrap(),
            number: PrNumber(42),
        }
    }

    #[test]
    fn commands_name_their_gates() {
        let keys = |c| {
            gates_for(c, &pr())
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(Command::Promote),
            vec!["/gates/promote/acme/shop/pr/42"]
        );
        assert_eq!(
            keys(Command::Rollback),
            vec!["/gates/rollback/acme/shop/pr/42"]
        );
        assert_eq!(
            keys(Command::Hold).len(),
            3,
            "a hold never blocks a rollback"
        );
        assert!(keys(Command::Status).is_empty());
        assert_eq!(pr().display(), "acme/shop#42");
    }
}
