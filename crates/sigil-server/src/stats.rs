//! Counters of accepted and rejected messages, by reason.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Shared counters. Cheap to clone; every clone sees the same numbers.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    inner: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Stats {
    pub fn add(&self, key: &str, n: u64) {
        if let Ok(mut m) = self.inner.lock() {
            *m.entry(key.to_string()).or_insert(0) += n;
        }
    }

    /// Sets a gauge (a level, not a count: bytes held, peaks).
    pub fn set(&self, key: &str, v: u64) {
        if let Ok(mut m) = self.inner.lock() {
            match m.get_mut(key) {
                Some(old) => *old = v,
                None => {
                    m.insert(key.to_string(), v);
                }
            }
        }
    }

    pub fn incr(&self, key: &str) {
        self.add(key, 1);
    }

    /// Adds a batch of local counts at once (one lock per batch).
    pub fn merge(&self, local: &mut BTreeMap<&'static str, u64>) {
        if let Ok(mut m) = self.inner.lock() {
            for (k, v) in local.iter() {
                *m.entry((*k).to_string()).or_insert(0) += v;
            }
        }
        local.clear();
    }

    pub fn get(&self, key: &str) -> u64 {
        self.inner
            .lock()
            .map(|m| m.get(key).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.inner.lock().map(|m| m.clone()).unwrap_or_default()
    }
}
