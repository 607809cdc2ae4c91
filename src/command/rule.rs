//! Which of the policy's per-command rules governs a command. The policy
//! file's `[github.commands.<name>]` and `[slack.commands.<name>]` are keyed
//! by it, so a name that is none of these does not read.

use std::fmt;

use super::Verb;

/// Which of the policy's rules governs a command: the word's, break glass's,
/// or a rule of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    Verb(Verb),
    Force,
    Close,
    Freeze,
    Unfreeze,
    /// Creating and retiring gates by name: a pipeline's.
    Named,
}

impl Rule {
    /// The rules that are no command word.
    const OWN: [Rule; 5] = [
        Rule::Force,
        Rule::Close,
        Rule::Freeze,
        Rule::Unfreeze,
        Rule::Named,
    ];

    /// The rule's name in the policy (`[github.commands.<name>]`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Verb(verb) => verb.as_str(),
            Self::Force => "force",
            Self::Close => "close",
            Self::Freeze => "freeze",
            Self::Unfreeze => "unfreeze",
            Self::Named => "named",
        }
    }

    /// The rule named `name`, exactly as the policy writes it.
    pub fn parse(name: &str) -> Option<Self> {
        Verb::ALL
            .into_iter()
            .map(Rule::Verb)
            .chain(Self::OWN)
            .find(|r| r.name() == name)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Rule::parse(&name).ok_or_else(|| {
            let known: Vec<&str> = Verb::ALL
                .into_iter()
                .map(Rule::Verb)
                .chain(Self::OWN)
                .map(Rule::name)
                .collect();
            serde::de::Error::custom(format!(
                "unknown command `{name}`: one of {}",
                known.join(", ")
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_reads_back_from_its_name() {
        for rule in Verb::ALL.into_iter().map(Rule::Verb).chain(Rule::OWN) {
            assert_eq!(Rule::parse(rule.name()), Some(rule));
        }
        assert_eq!(Rule::parse("promot"), None);
        assert_eq!(Rule::parse("Promote"), None);
    }
}
