//! What ends web sign-ins on every replica: sessions signed out (kept until
//! they would have expired) and OAuth `state`s already used (by their hash,
//! kept until their trip would have ended). Expired rows are deleted as new
//! ones are added, so each table holds at most what could still be replayed.

use super::Result;
use super::Sessions;
use crate::gate::Millis;

impl<'s> Sessions<'s> {
    /// Ends session `id` (a copy of its cookie is refused from now on) until
    /// `expires_at`, when the cookie is refused anyway.
    pub async fn revoke_session(self, id: &str, expires_at: Millis, now: Millis) -> Result<()> {
        let mut tx = self.store.begin().await?;
        sqlx::query("DELETE FROM revoked_sessions WHERE expires_at <= $1")
            .bind(now)
            .execute(tx.conn())
            .await?;
        sqlx::query(
            "INSERT INTO revoked_sessions (id, expires_at) VALUES ($1, $2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(id.to_string())
        .bind(expires_at)
        .execute(tx.conn())
        .await?;
        tx.commit().await
    }

    /// Whether session `id` was signed out.
    pub async fn session_revoked(self, id: &str) -> Result<bool> {
        let row = sqlx::query("SELECT 1 FROM revoked_sessions WHERE id = $1")
            .bind(id.to_string())
            .fetch_optional(&self.store.pool)
            .await?;
        Ok(row.is_some())
    }

    /// Marks an OAuth `state` (its hash) used until `expires_at`. False: it
    /// was used already, here or on another replica.
    pub async fn use_oauth_state(
        self,
        state_hash: &str,
        expires_at: Millis,
        now: Millis,
    ) -> Result<bool> {
        let mut tx = self.store.begin().await?;
        sqlx::query("DELETE FROM used_oauth_states WHERE expires_at <= $1")
            .bind(now)
            .execute(tx.conn())
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO used_oauth_states (state_hash, expires_at) VALUES ($1, $2) \
             ON CONFLICT (state_hash) DO NOTHING",
        )
        .bind(state_hash.to_string())
        .bind(expires_at)
        .execute(tx.conn())
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(inserted == 1)
    }

    /// Whether an OAuth `state` (its hash) was used already.
    pub async fn oauth_state_used(self, state_hash: &str) -> Result<bool> {
        let row = sqlx::query("SELECT 1 FROM used_oauth_states WHERE state_hash = $1")
            .bind(state_hash.to_string())
            .fetch_optional(&self.store.pool)
            .await?;
        Ok(row.is_some())
    }
}
