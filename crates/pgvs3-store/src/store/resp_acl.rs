//! RESP ACL rules (`pgvs3.resp_acl_users`, migration 0042): one row per user that ACL SETUSER
//! narrowed, its rules as text; and how many times ACL DELUSER deleted each user
//! (`pgvs3.resp_acl_deletions`, migration 0062). Every change moves the catalog version (the
//! rules table's trigger), so the gateways of the fleet know to read the rules again.

use super::{StoreError, StoreResult};
use crate::pg::checkout::checkout;

/// One user as the database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespAclUser {
    pub name: String,
    /// `None`: no rule narrows the user (never given any, or ACL DELUSER deleted them).
    pub rules: Option<String>,
    /// How many times ACL DELUSER deleted the user: a connection signed in before a deletion
    /// is closed, whatever rules the user has now.
    pub deletions: i64,
}

impl super::Catalog {
    /// Every user with rules or deletions, by name.
    pub async fn resp_acl_users(&self) -> StoreResult<Vec<RespAclUser>> {
        let client = checkout(self.pool()).await?;
        let rows = client
            .query(
                "SELECT name, u.rules, coalesce(d.deletions, 0) AS deletions
                   FROM pgvs3.resp_acl_users u FULL JOIN pgvs3.resp_acl_deletions d USING (name)
                  ORDER BY name",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| RespAclUser {
                name: row.get("name"),
                rules: row.get("rules"),
                deletions: row.get("deletions"),
            })
            .collect())
    }

    /// Stores a user's rules, unless that would make more than `max_users` rows; false then.
    /// This gateway reloads its catalog before answering, so its next command sees the change.
    pub async fn put_resp_acl_user(&self, name: &str, rules: &str, max_users: i64) -> StoreResult<bool> {
        let client = checkout(self.pool()).await?;
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
        let client = checkout(self.pool()).await?;
        let exists = client
            .query_opt("SELECT 1 FROM pgvs3.resp_acl_users WHERE name = $1", &[&name])
            .await?
            .is_some();
        Ok(exists)
    }

    /// Drops users' rules (their keys keep their own rights) and counts each one's deletion;
    /// how many had rules.
    pub async fn delete_resp_acl_users(&self, names: &[String]) -> StoreResult<u64> {
        let client = checkout(self.pool()).await?;
        let deleted = client
            .execute(
                "WITH deleted AS (DELETE FROM pgvs3.resp_acl_users WHERE name = ANY ($1) RETURNING name)
                 INSERT INTO pgvs3.resp_acl_deletions (name, deletions)
                 SELECT name, 1 FROM deleted
                 ON CONFLICT (name) DO UPDATE SET deletions = pgvs3.resp_acl_deletions.deletions + 1",
                &[&names],
            )
            .await?;
        drop(client);
        self.reload_now()
            .await
            .map_err(|err| StoreError::Unavailable(err.to_string()))?;
        Ok(deleted)
    }
}
