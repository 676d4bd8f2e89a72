//! RESP ACL rules (`pgvs3.resp_acl_users`, migration 0039): one row per user that ACL SETUSER
//! narrowed, its rules as text. Every change moves the catalog version (the table's trigger), so
//! the gateways of the fleet know to read the rules again.

use super::{StoreError, StoreResult};

impl super::Catalog {
    /// Every user's rules, by name.
    pub async fn resp_acl_users(&self) -> StoreResult<Vec<(String, String)>> {
        let client = self.pool().get().await?;
        let rows = client
            .query("SELECT name, rules FROM pgvs3.resp_acl_users ORDER BY name", &[])
            .await?;
        Ok(rows.iter().map(|row| (row.get("name"), row.get("rules"))).collect())
    }

    /// Stores a user's rules, unless that would make more than `max_users` rows; false then.
    /// This gateway reloads its catalog before answering, so its next command sees the change.
    pub async fn put_resp_acl_user(&self, name: &str, rules: &str, max_users: i64) -> StoreResult<bool> {
        let client = self.pool().get().await?;
        let stored = client
            .query_opt(
                "INSERT INTO pgvs3.resp_acl_users (name, rules)
                 SELECT $1, $2
                  WHERE EXISTS (SELECT 1 FROM pgvs3.resp_acl_users WHERE name = $1)
                     OR (SELECT count(*) FROM pgvs3.resp_acl_users) < $3
                 ON CONFLICT (name) DO UPDATE SET rules = EXCLUDED.rules, updated_at = now()
                  WHERE pgvs3.resp_acl_users.rules IS DISTINCT FROM EXCLUDED.rules
                 RETURNING 1",
                &[&name, &rules, &max_users],
            )
            .await?
            .is_some();
        drop(client);
        self.reload_now()
            .await
            .map_err(|err| StoreError::Unavailable(err.to_string()))?;
        if stored {
            return Ok(true);
        }
        // Nothing written: the same rules were there already, or the table is full.
        let client = self.pool().get().await?;
        let exists = client
            .query_opt("SELECT 1 FROM pgvs3.resp_acl_users WHERE name = $1", &[&name])
            .await?
            .is_some();
        Ok(exists)
    }

    /// Drops users' rules (their keys keep their own rights); how many there were.
    pub async fn delete_resp_acl_users(&self, names: &[String]) -> StoreResult<u64> {
        let client = self.pool().get().await?;
        let deleted = client
            .execute("DELETE FROM pgvs3.resp_acl_users WHERE name = ANY ($1)", &[&names])
            .await?;
        drop(client);
        self.reload_now()
            .await
            .map_err(|err| StoreError::Unavailable(err.to_string()))?;
        Ok(deleted)
    }
}
