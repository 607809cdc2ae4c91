//! A small map whose answers are trusted for a while: GitHub permissions and
//! team memberships, Slack group members. Bounded, so that many distinct
//! people cannot grow it without end.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept at most; past it, expired ones go, and if none has expired, all.
const MAX_ENTRIES: usize = 10_000;

pub struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The value, while it is younger than the TTL.
    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().expect("cache poisoned");
        entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    pub fn put(&self, key: K, value: V) {
        let mut entries = self.entries.lock().expect("cache poisoned");
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (Instant::now(), value));
    }

    /// The cached value, or `fetch`'s answer, remembered when it is Ok.
    pub async fn get_or_fetch<E, Fut>(&self, key: K, fetch: impl FnOnce() -> Fut) -> Result<V, E>
    where
        Fut: Future<Output = Result<V, E>>,
    {
        if let Some(v) = self.get(&key) {
            return Ok(v);
        }
        let v = fetch().await?;
        self.put(key, v.clone());
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_expire_and_the_map_stays_bounded() {
        let c = TtlCache::new(Duration::from_secs(60));
        c.put("a", 1);
        assert_eq!(c.get(&"a"), Some(1));
        let old = TtlCache::new(Duration::ZERO);
        old.put("a", 1);
        assert_eq!(old.get(&"a"), None, "expired at once");
        let many = TtlCache::new(Duration::from_secs(60));
        for i in 0..MAX_ENTRIES + 5 {
            many.put(i, i);
        }
        assert!(many.entries.lock().unwrap().len() <= MAX_ENTRIES);
        assert_eq!(many.get(&(MAX_ENTRIES + 4)), Some(MAX_ENTRIES + 4));
    }
}
