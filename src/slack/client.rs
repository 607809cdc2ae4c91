//! Slack Web API calls (slack-morphism), with `GATEBOT_SLACK_API_URL` as the base,
//! and how their failures map onto the outbox's retry rules.

use std::time::Duration;

use serde::Serialize;
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;

use crate::notify::SendError;

type Connector = SlackClientHyperConnector<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
>;

pub struct SlackApi {
    client: SlackClient<Connector>,
    token: SlackApiToken,
}

/// A message posted to an interaction's or command's `response_url`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Response {
    /// `ephemeral` (only the person who clicked sees it) or `in_channel`.
    pub response_type: String,
    pub text: String,
    #[serde(default)]
    pub replace_original: bool,
}

impl Response {
    pub fn ephemeral(text: impl Into<String>) -> Self {
        Self {
            response_type: "ephemeral".into(),
            text: text.into(),
            replace_original: false,
        }
    }
}

impl SlackApi {
    pub fn new(api_url: &str, bot_token: &str) -> anyhow::Result<Self> {
        // https_or_http: the base URL may point at a local stand-in (tests, proxies).
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| anyhow::anyhow!("cannot load CA certificates for Slack: {e}"))?
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .build();
        let connector = SlackClientHyperConnector::with_connector(https)
            .with_slack_api_url(api_url.trim_end_matches('/'));
        Ok(Self {
            client: SlackClient::new(connector),
            token: SlackApiToken::new(SlackApiTokenValue::new(bot_token.to_string())),
        })
    }

    /// chat.postMessage; returns the channel id and the message ts.
    pub async fn post_message(
        &self,
        channel: &str,
        text: &str,
        blocks: Option<Vec<SlackBlock>>,
        thread_ts: Option<&str>,
    ) -> Result<(String, String), SendError> {
        let content = SlackMessageContent::new()
            .with_text(text.to_string())
            .opt_blocks(blocks);
        let req = SlackApiChatPostMessageRequest::new(channel.into(), content)
            .opt_thread_ts(thread_ts.map(|t| SlackTs::new(t.to_string())));
        let res = within(
            "chat.postMessage",
            self.client
                .open_session(&self.token)
                .chat_post_message(&req),
        )
        .await?;
        Ok((res.channel.to_string(), res.ts.to_string()))
    }

    /// chat.update with the full new block list.
    pub async fn update(
        &self,
        channel: &str,
        ts: &str,
        text: &str,
        blocks: Vec<SlackBlock>,
    ) -> Result<(), SendError> {
        let content = SlackMessageContent::new()
            .with_text(text.to_string())
            .with_blocks(blocks);
        let req =
            SlackApiChatUpdateRequest::new(channel.into(), content, SlackTs::new(ts.to_string()));
        within(
            "chat.update",
            self.client.open_session(&self.token).chat_update(&req),
        )
        .await?;
        Ok(())
    }

    /// Posts to a `response_url` (no token: the URL is the credential).
    pub async fn respond(&self, response_url: &str, body: &Response) -> Result<(), SendError> {
        let url: reqwest::Url = response_url
            .parse()
            .map_err(|e| SendError::Permanent(format!("response_url `{response_url}`: {e}")))?;
        let span = tracing::debug_span!("slack response_url");
        // No token: the URL itself is the credential, and it is not logged.
        let context = SlackClientApiCallContext {
            rate_control_params: None,
            token: None,
            tracing_span: &span,
            is_sensitive_url: true,
        };
        let _: serde_json::Value = within(
            "response_url",
            self.client
                .http_api
                .connector
                .http_post_uri(url, body, context),
        )
        .await?;
        Ok(())
    }

    /// usergroups.users.list: the members of a user group.
    pub async fn group_members(&self, group: &str) -> Result<Vec<String>, SendError> {
        let req = SlackApiUserGroupsUsersListRequest::new(group.into());
        let res = within(
            "usergroups.users.list",
            self.client
                .open_session(&self.token)
                .usergroups_users_list(&req),
        )
        .await?;
        Ok(res.users.into_iter().map(|u| u.to_string()).collect())
    }
}

/// Slack's error codes that no retry can fix (configuration, permissions, content).
const PERMANENT: &[&str] = &[
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "no_permission",
    "missing_scope",
    "not_allowed_token_type",
    "invalid_blocks",
    "invalid_blocks_format",
    "msg_too_long",
    "no_text",
    "message_not_found",
    "cant_update_message",
    "edit_window_closed",
    "no_such_subteam",
    "invalid_arguments",
    "expired_url",
    "used_url",
    "restricted_action",
    "team_access_not_granted",
];

/// Rate limits and Slack-side trouble are retried (honouring Retry-After);
/// configuration and content errors are not. Unknown codes are retried, within
/// the outbox's attempt limit, rather than dropping a message on a new code.
/// The longest one Slack call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Bounds one call, so a hanging Slack holds up only the work waiting on it.
async fn within<T>(
    method: &str,
    call: impl std::future::Future<Output = Result<T, SlackClientError>>,
) -> Result<T, SendError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(answer) => answer.map_err(|e| classify(method, e)),
        Err(_) => Err(SendError::retry(format!(
            "Slack {method}: no answer within {CALL_TIMEOUT:?}"
        ))),
    }
}

pub fn classify(method: &str, e: SlackClientError) -> SendError {
    match e {
        SlackClientError::RateLimitError(r) => SendError::Retry {
            after: Some(r.retry_after.unwrap_or(Duration::from_secs(1))),
            message: format!("{method}: rate limited by Slack"),
        },
        SlackClientError::ApiError(a) if a.code == "ratelimited" => SendError::Retry {
            after: Some(Duration::from_secs(1)),
            message: format!("{method}: ratelimited"),
        },
        SlackClientError::ApiError(a) if PERMANENT.contains(&a.code.as_str()) => {
            SendError::Permanent(format!("{method}: {}", hint(&a.code)))
        }
        SlackClientError::ApiError(a) => SendError::retry(format!("{method}: {}", a.code)),
        SlackClientError::HttpError(h)
            if h.status_code.is_client_error()
                && h.status_code.as_u16() != 408
                && h.status_code.as_u16() != 404 =>
        {
            SendError::Permanent(format!("{method}: HTTP {}", h.status_code))
        }
        other => SendError::retry(format!("{method}: {other}")),
    }
}

fn hint(code: &str) -> String {
    match code {
        "not_in_channel" => {
            "not_in_channel: invite the app to the channel (/invite @gatebot)".into()
        }
        "channel_not_found" => {
            "channel_not_found: check GATEBOT_SLACK_CHANNEL or the canary's slack_channel metadata"
                .into()
        }
        "invalid_auth" | "not_authed" | "token_revoked" | "token_expired" => {
            format!("{code}: check GATEBOT_SLACK_BOT_TOKEN")
        }
        "missing_scope" => {
            "missing_scope: the app needs chat:write, commands and usergroups:read".into()
        }
        other => other.to_string(),
    }
}
