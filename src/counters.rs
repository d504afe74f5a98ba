//! Named counter arrays for the TCP workers: a worker owns a plain [`Counters`] and publishes it
//! with relaxed stores into a [`SharedCounters`] the reporter loads. [`counter_array!`] names
//! the indices (an enum) and the JSON keys of one array, so a counter added to the enum shows up
//! in every summary without another edit.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A worker's own counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counters<const N: usize>(pub [u64; N]);

impl<const N: usize> Default for Counters<N> {
    fn default() -> Self {
        Counters([0; N])
    }
}

impl<const N: usize> Counters<N> {
    /// Adds `v` to counter `k`.
    #[inline]
    pub(crate) fn add(&mut self, k: impl Into<usize>, v: u64) {
        self.0[k.into()] += v;
    }

    /// Subtracts `v` from gauge `k`.
    #[inline]
    pub(crate) fn sub(&mut self, k: impl Into<usize>, v: u64) {
        let k = k.into();
        self.0[k] = self.0[k].saturating_sub(v);
    }

    /// Counter `k`.
    #[inline]
    pub(crate) fn get(&self, k: impl Into<usize>) -> u64 {
        self.0[k.into()]
    }

    /// Adds every counter of `other` (totals over queues).
    pub(crate) fn merge(&mut self, other: &Counters<N>) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }
}

/// The shared mirror of a worker's [`Counters`] (single writer).
#[derive(Debug)]
pub(crate) struct SharedCounters<const N: usize>([AtomicU64; N]);

impl<const N: usize> Default for SharedCounters<N> {
    fn default() -> Self {
        SharedCounters(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl<const N: usize> SharedCounters<N> {
    /// Stores every counter.
    pub(crate) fn publish(&self, v: &Counters<N>) {
        for (a, x) in self.0.iter().zip(v.0) {
            a.store(x, Relaxed);
        }
    }

    /// Loads every counter.
    pub(crate) fn load(&self) -> Counters<N> {
        Counters(std::array::from_fn(|i| self.0[i].load(Relaxed)))
    }
}

/// `counter_array! { #[doc] Kind, KEYS, Plain, Shared { #[doc] Variant = "json_key", ... } }`
/// defines the index enum `Kind`, the key list `KEYS` and the aliases `Plain` and `Shared`.
#[macro_export]
macro_rules! counter_array {
    ($(#[$m:meta])* $kind:ident, $keys:ident, $plain:ident, $shared:ident {
        $($(#[$vm:meta])* $var:ident = $key:literal),* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub(crate) enum $kind { $($(#[$vm])* $var),* }

        impl From<$kind> for usize {
            fn from(k: $kind) -> usize {
                k as usize
            }
        }

        /// JSON keys of the counters, in index order.
        pub(crate) const $keys: &[&str] = &[$($key),*];
        /// A worker's own counters.
        pub(crate) type $plain = $crate::counters::Counters<{ $keys.len() }>;
        /// The counters as the reporter reads them.
        pub(crate) type $shared = $crate::counters::SharedCounters<{ $keys.len() }>;
    };
}

#[cfg(test)]
mod tests {
    counter_array! {
        /// Test counters.
        K, KEYS, Plain, Shared {
            /// a
            A = "a",
            /// b
            B = "b",
        }
    }

    #[test]
    fn publish_load_and_merge() {
        let mut c = Plain::default();
        c.add(K::B, 5);
        c.add(K::A, 1);
        c.sub(K::A, 3);
        let shared = Shared::default();
        shared.publish(&c);
        let mut total = shared.load();
        total.merge(&c);
        assert_eq!((total.get(K::A), total.get(K::B)), (0, 10));
        assert_eq!(KEYS, &["a", "b"]);
    }
}
