//! Lock-free metric storage: latency histograms and counters keyed by label values.

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Arc, RwLock,
        atomic::{AtomicU64, Ordering::Relaxed},
    },
    time::Duration,
};

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Upper bounds (seconds) of the latency histograms' buckets.
pub(super) const LATENCY_BUCKETS: [f64; 14] = [
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    f64::INFINITY,
];

/// A latency histogram made of atomics (no lock on observe).
pub(super) struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub(super) fn new() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub(super) fn observe(&self, value: Duration) {
        let secs = value.as_secs_f64();
        let index = LATENCY_BUCKETS
            .iter()
            .position(|bound| secs <= *bound)
            .unwrap_or(LATENCY_BUCKETS.len() - 1);
        self.buckets[index].fetch_add(1, Relaxed);
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }

    pub(super) fn encode(
        &self,
        name: &str,
        help: &str,
        encoder: &mut DescriptorEncoder,
    ) -> fmt::Result {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
        let (sum, count, buckets) = self.snapshot();
        metric.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    pub(super) fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(bound, count)| (*bound, count.load(Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        (sum, count, buckets)
    }
}

/// Counters keyed by a label value not known in advance; a read lock on the common path.
pub(super) struct LabeledCounters<K> {
    counters: RwLock<HashMap<K, Arc<AtomicU64>>>,
}

impl<K: std::hash::Hash + Eq + Clone + Ord> LabeledCounters<K> {
    pub(super) fn new() -> Self {
        Self {
            counters: RwLock::new(HashMap::new()),
        }
    }

    pub(super) fn inc(&self, key: &K) {
        let counters = self
            .counters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(counter) = counters.get(key) {
            counter.fetch_add(1, Relaxed);
            return;
        }
        drop(counters);
        self.counters
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .fetch_add(1, Relaxed);
    }

    pub(super) fn snapshot(&self) -> Vec<(K, u64)> {
        let mut values: Vec<(K, u64)> = self
            .counters
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(key, value)| (key.clone(), value.load(Relaxed)))
            .collect();
        values.sort_by(|a, b| a.0.cmp(&b.0));
        values
    }
}
