//! Tags: small key-value sets S3 keeps beside an object (in its metadata) or a bucket (in its
//! catalog row). Setting them never touches the body, the ETag or Last-Modified.

use std::collections::BTreeMap;

use tokio_postgres::types::Json;

use super::objects::check_key;
use super::{BucketInfo, ObjectMeta, Store, StoreError, StoreResult};

pub type Tags = BTreeMap<String, String>;

/// S3's limits: 10 tags on an object, 50 on a bucket; keys up to 128 characters, values up to 256.
pub const MAX_OBJECT_TAGS: usize = 10;
pub const MAX_BUCKET_TAGS: usize = 50;
const MAX_TAG_KEY: usize = 128;
const MAX_TAG_VALUE: usize = 256;

/// Checks a tag set as S3 does, and returns it as a map.
pub fn tag_set(pairs: impl IntoIterator<Item = (String, String)>, max: usize) -> StoreResult<Tags> {
    let mut tags = Tags::new();
    for (key, value) in pairs {
        if key.is_empty() || key.chars().count() > MAX_TAG_KEY {
            return Err(StoreError::InvalidTag(
                "the tag key is empty or longer than 128 characters".into(),
            ));
        }
        if value.chars().count() > MAX_TAG_VALUE {
            return Err(StoreError::InvalidTag(
                "the tag value is longer than 256 characters".into(),
            ));
        }
        if tags.insert(key, value).is_some() {
            return Err(StoreError::InvalidTag(
                "cannot provide multiple tags with the same key".into(),
            ));
        }
    }
    if tags.len() > max {
        return Err(StoreError::InvalidTag(format!(
            "object tags cannot be greater than {max}"
        )));
    }
    Ok(tags)
}

impl Store {
    /// Replaces the tags of one version (by id: current or noncurrent; `None`: the current
    /// one), once `allowed` took the version's metadata, read under its row's lock.
    pub(crate) async fn set_version_tags(
        &self,
        bucket: &BucketInfo,
        key: &str,
        version_id: Option<&str>,
        tags: &Tags,
        allowed: impl FnOnce(&ObjectMeta) -> StoreResult<()>,
    ) -> StoreResult<()> {
        let value = (!tags.is_empty())
            .then(|| serde_json::to_value(tags))
            .transpose()
            .map_err(|err| StoreError::InvalidArgument(err.to_string()))?;
        self.patch_version_meta(bucket, key, version_id, "tg", value, |meta, _| allowed(meta))
            .await
    }

    /// Replaces an object's tags (none removes them all).
    pub(crate) async fn set_object_tags(&self, bucket: &BucketInfo, key: &str, tags: &Tags) -> StoreResult<()> {
        check_key(key)?;
        let client = self.client().await?;
        let statement = client.prepare_cached(&bucket.sql.set_tags).await?;
        if client.execute(&statement, &[&bucket.id, &key, &Json(tags)]).await? == 1 {
            return Ok(());
        }
        let statement = client.prepare_cached(&bucket.sql.head).await?;
        let row = client.query_opt(&statement, &[&bucket.id, &key]).await?;
        self.found(bucket, row)?;
        Err(StoreError::NoSuchKey)
    }

    /// A bucket's tags; `None` when it has none (S3's NoSuchTagSet).
    pub(crate) async fn bucket_tags(&self, bucket: &BucketInfo) -> StoreResult<Option<Tags>> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT tags FROM pgvs3.buckets WHERE id = $1", &[&bucket.id])
            .await?
            .ok_or(StoreError::NoSuchBucket)?;
        Ok(row.get::<_, Option<Json<Tags>>>("tags").map(|Json(tags)| tags))
    }

    /// Replaces a bucket's tags; `None` deletes them.
    pub(crate) async fn set_bucket_tags(&self, bucket: &BucketInfo, tags: Option<&Tags>) -> StoreResult<()> {
        let client = self.client().await?;
        let updated = client
            .execute(
                "UPDATE pgvs3.buckets SET tags = $2 WHERE id = $1",
                &[&bucket.id, &tags.map(Json)],
            )
            .await?;
        if updated == 0 {
            return Err(StoreError::NoSuchBucket);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_sets_are_checked_as_s3_does() {
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(tag_set([pair("a", "1"), pair("b", "")], 10).unwrap().len(), 2);
        assert!(matches!(
            tag_set([pair("a", "1"), pair("a", "2")], 10),
            Err(StoreError::InvalidTag(_))
        ));
        assert!(matches!(tag_set([pair("", "1")], 10), Err(StoreError::InvalidTag(_))));
        assert!(matches!(
            tag_set([pair(&"k".repeat(129), "1")], 10),
            Err(StoreError::InvalidTag(_))
        ));
        assert!(matches!(
            tag_set([pair("k", &"v".repeat(257))], 10),
            Err(StoreError::InvalidTag(_))
        ));
        let eleven = (0..11).map(|i| pair(&i.to_string(), "v"));
        assert!(matches!(
            tag_set(eleven, MAX_OBJECT_TAGS),
            Err(StoreError::InvalidTag(_))
        ));
    }
}
