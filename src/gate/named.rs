//! What a pipeline says about a gate it creates by name (`POST
//! /api/v1/gates`): a title, links, a Slack channel, a pull request.

use serde::{Deserialize, Serialize};

use super::{PrNumber, RepoName};

/// A link shown with a named gate: a pipeline run, a change list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    pub url: String,
}

/// What the pipeline said about its gate; creating it again with the same
/// spec is the same gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedSpec {
    pub title: Option<String>,
    pub links: Vec<Link>,
    pub slack_channel: Option<String>,
    /// `owner/repo#42` in JSON.
    #[serde(serialize_with = "pr_text", deserialize_with = "pr_of_text")]
    pub pr: Option<(RepoName, PrNumber)>,
}

fn pr_text<S: serde::Serializer>(
    pr: &Option<(RepoName, PrNumber)>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match pr {
        Some((repo, n)) => s.collect_str(&format_args!("{repo}#{n}")),
        None => s.serialize_none(),
    }
}

fn pr_of_text<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<(RepoName, PrNumber)>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    let bad = || serde::de::Error::custom(format!("`{text}` is not owner/repo#42"));
    let (repo, number) = text.split_once('#').ok_or_else(bad)?;
    Ok(Some((
        repo.parse().map_err(|_| bad())?,
        number.parse().map_err(|_| bad())?,
    )))
}

impl NamedSpec {
    /// The fields in which `other` differs from this spec.
    pub fn differences(&self, other: &NamedSpec) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.title != other.title {
            out.push("title");
        }
        if self.links != other.links {
            out.push("links");
        }
        if self.slack_channel != other.slack_channel {
            out.push("slack_channel");
        }
        if self.pr != other.pr {
            out.push("pr");
        }
        out
    }
}
