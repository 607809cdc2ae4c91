//! Who may act from Slack: user ids listed directly, or members of listed user
//! groups (fetched with usergroups.users.list and cached briefly).

use std::sync::Arc;
use std::time::Duration;

use super::client::SlackApi;
use crate::cache::TtlCache;
use crate::notify::SendError;
use crate::policy::ChatRule;

/// Group membership changes rarely; a short cache keeps clicks fast and
/// within Slack's tier-2 rate limit.
pub const GROUP_TTL: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// The rule lists nobody.
    Nobody,
    NotApprover,
}

fn is_group(id: &str) -> bool {
    id.starts_with('S')
}

/// Decides without asking Slack when that is possible (no group to expand).
pub fn quick(rule: &ChatRule, user: &str) -> Option<Verdict> {
    if rule.approvers.is_empty() {
        return Some(Verdict::Nobody);
    }
    if !user.is_empty() && rule.approvers.iter().any(|a| a == user) {
        return Some(Verdict::Allowed);
    }
    if user.is_empty() || !rule.approvers.iter().any(|a| is_group(a)) {
        return Some(Verdict::NotApprover);
    }
    None
}

pub struct Approvers {
    api: Arc<SlackApi>,
    /// Group id → members.
    cache: TtlCache<String, Arc<Vec<String>>>,
}

impl Approvers {
    pub fn new(api: Arc<SlackApi>) -> Self {
        Self {
            api,
            cache: TtlCache::new(GROUP_TTL),
        }
    }

    pub async fn check(&self, rule: &ChatRule, user: &str) -> Result<Verdict, SendError> {
        if let Some(v) = quick(rule, user) {
            return Ok(v);
        }
        for group in rule.approvers.iter().filter(|a| is_group(a)) {
            if self.members(group).await?.iter().any(|m| m == user) {
                return Ok(Verdict::Allowed);
            }
        }
        Ok(Verdict::NotApprover)
    }

    /// Whether Slack user `user` is in user group `group`.
    pub async fn is_member(&self, group: &str, user: &str) -> Result<bool, SendError> {
        Ok(self.members(group).await?.iter().any(|m| m == user))
    }

    async fn members(&self, group: &str) -> Result<Arc<Vec<String>>, SendError> {
        self.cache
            .get_or_fetch(group.to_string(), || async {
                Ok(Arc::new(self.api.group_members(group).await?))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(approvers: &[&str]) -> ChatRule {
        ChatRule {
            approvers: approvers.iter().map(|s| s.to_string()).collect(),
            forbid_self_approval: false,
            setting: "the policy file's [slack] approvers".into(),
        }
    }

    #[test]
    fn quick_decisions() {
        assert_eq!(quick(&rule(&[]), "U1"), Some(Verdict::Nobody));
        assert_eq!(quick(&rule(&["U1"]), "U1"), Some(Verdict::Allowed));
        assert_eq!(quick(&rule(&["U1"]), "U2"), Some(Verdict::NotApprover));
        assert_eq!(quick(&rule(&["U1", "S1"]), "U2"), None, "needs the group");
        assert_eq!(quick(&rule(&["S1"]), ""), Some(Verdict::NotApprover));
    }
}
