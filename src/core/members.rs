//! Who is in the groups that quorum rules want among the approvers: asked
//! before the unit opens (of GitHub, Slack or the policy, through the port
//! the bootstrap fills), and carried into the vote.

use std::collections::BTreeSet;

use super::{CommandError, Engine, Provenance};
use crate::gate::{quorum, GateKey, Group};
use crate::notify::BoxFuture;

/// Answers whether a person is in a group. A person is known by what their
/// channel proved ([`Provenance::login`], [`Provenance::slack_user`]); a
/// token's holder is in no group.
pub trait Membership: Send + Sync {
    fn is_member<'a>(
        &'a self,
        group: &'a Group,
        who: &'a Provenance,
    ) -> BoxFuture<'a, Result<bool, CommandError>>;
}

/// The groups of the rules at `keys` that `who` is in: each asked once.
pub async fn groups_of(
    engine: &Engine,
    keys: &[GateKey],
    who: &Provenance,
) -> Result<Vec<Group>, CommandError> {
    let rules = &engine.settings.quorum;
    let named: BTreeSet<Group> = keys
        .iter()
        .flat_map(|key| quorum::most(rules, key).include)
        .map(|inc| inc.group)
        .collect();
    let Some(membership) = engine.membership.get().filter(|_| !named.is_empty()) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for group in named {
        if membership.is_member(&group, who).await? {
            found.push(group);
        }
    }
    Ok(found)
}
