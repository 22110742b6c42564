//! Copy-on-write containers whose clone costs a few dozen reference counts,
//! not a copy of every entry: the scheduler publishes a clone of its state
//! after each batch of writes, and the state holds maps of every pod and
//! per-node arrays of every node.
//!
//! [`CowMap`] is a hash map split into [`SHARDS`] shards behind `Arc`s, and
//! [`CowVec`] a vector split into chunks of [`CHUNK`] behind `Arc`s. A clone
//! shares every shard and chunk; the first write to one after a clone copies
//! that shard or chunk alone. Reads cost one more pointer hop than the plain
//! containers.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

/// The default hasher: the cache's `NameHasher` (keyed at random per process).
type NameHasher = ahash::RandomState;

/// Shards of a [`CowMap`]: a write after a clone copies about 1/256 of the
/// map (about 200 entries of a 50,000-pod map). The scheduler publishes
/// after every write, so this copy is paid per watch event.
pub const SHARDS: usize = 256;

/// Which bits of a key's hash pick its shard. The shard's own table takes
/// its bucket from the low bits and its tag from the top 7, so bits from the
/// middle leave both as random as in one big map.
const SHARD_SHIFT: u32 = 32;

/// A hash map that clones in O([`SHARDS`]).
pub struct CowMap<K, V, S = NameHasher> {
    /// The shard list is itself shared: a clone is one reference count, and
    /// the first write after it copies the list (an `Arc` per shard) and
    /// then the one shard. A clone that touched every shard's count made
    /// publishing and dropping a snapshot cost ~10,000 cache misses.
    shards: Arc<Vec<Arc<HashMap<K, V, S>>>>,
    hasher: S,
    len: usize,
    /// A bit per shard that holds entries: walks over the map visit only
    /// those, so a walk over a small map does not load 256 shards (a
    /// per-node check walking a near-empty map was ~3 ms per pod).
    occupied: [u64; SHARDS / 64],
}

impl<K, V, S: Clone> Clone for CowMap<K, V, S> {
    fn clone(&self) -> Self {
        Self {
            shards: self.shards.clone(),
            hasher: self.hasher.clone(),
            len: self.len,
            occupied: self.occupied,
        }
    }
}

impl<K, V, S: BuildHasher + Clone + Default> Default for CowMap<K, V, S> {
    fn default() -> Self {
        let hasher = S::default();
        Self {
            shards: Arc::new(
                (0..SHARDS)
                    .map(|_| Arc::new(HashMap::with_hasher(hasher.clone())))
                    .collect(),
            ),
            hasher,
            len: 0,
            occupied: [0; SHARDS / 64],
        }
    }
}

impl<K, V, S> CowMap<K, V, S>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher + Clone + Default,
{
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The shard, writable: copies the shard list and then the shard if a
    /// clone shares them.
    fn shard_mut(&mut self, shard: usize) -> &mut HashMap<K, V, S> {
        Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[shard])
    }

    fn note_occupancy(&mut self, shard: usize) {
        let bit = 1u64 << (shard % 64);
        if self.shards[shard].is_empty() {
            self.occupied[shard / 64] &= !bit;
        } else {
            self.occupied[shard / 64] |= bit;
        }
    }

    fn occupied_shards(&self) -> impl Iterator<Item = usize> + '_ {
        (0..SHARDS).filter(|shard| self.occupied[shard / 64] & (1u64 << (shard % 64)) != 0)
    }

    fn shard_of<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        ((self.hasher.hash_one(key) >> SHARD_SHIFT) as usize) % SHARDS
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[self.shard_of(key)].get(key)
    }

    pub fn get_key_value<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[self.shard_of(key)].get_key_value(key)
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key).is_some()
    }

    /// Copies the key's shard first if a clone shares it, and only when the
    /// key is there.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard_of(key);
        if !self.shards[shard].contains_key(key) {
            return None;
        }
        self.shard_mut(shard).get_mut(key)
    }

    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let shard = self.shard_of(&key);
        let old = self.shard_mut(shard).insert(key, value);
        if old.is_none() {
            self.len += 1;
            self.occupied[shard / 64] |= 1u64 << (shard % 64);
        }
        old
    }

    /// The value under `key`, inserting `make()` first if there is none
    /// (the `entry(key).or_insert_with(make)` of a `HashMap`).
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let shard = self.shard_of(&key);
        if !self.shards[shard].contains_key(&key) {
            self.len += 1;
            self.occupied[shard / 64] |= 1u64 << (shard % 64);
        }
        self.shard_mut(shard).entry(key).or_insert_with(make)
    }

    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_entry(key).map(|(_, value)| value)
    }

    pub fn remove_entry<Q>(&mut self, key: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard_of(key);
        if !self.shards[shard].contains_key(key) {
            return None;
        }
        let removed = self.shard_mut(shard).remove_entry(key);
        if removed.is_some() {
            self.len -= 1;
            self.note_occupancy(shard);
        }
        removed
    }

    /// Keeps the entries `keep` accepts; copies only the shards it changes.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let occupied: Vec<usize> = self.occupied_shards().collect();
        for shard in occupied {
            if self.shards[shard].iter().all(|(k, v)| keep(k, v)) {
                continue;
            }
            let map = self.shard_mut(shard);
            let before = map.len();
            map.retain(|k, v| keep(k, v));
            self.len -= before - map.len();
            self.note_occupancy(shard);
        }
    }

    pub fn clear(&mut self) {
        *self = Self {
            hasher: self.hasher.clone(),
            ..Self::default()
        };
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.occupied_shards()
            .flat_map(move |shard| self.shards[shard].iter())
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }
}

impl<K, V, S> fmt::Debug for CowMap<K, V, S>
where
    K: fmt::Debug,
    V: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.shards.iter().flat_map(|shard| shard.iter()))
            .finish()
    }
}

impl<K, V, S> FromIterator<(K, V)> for CowMap<K, V, S>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher + Clone + Default,
{
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = Self::default();
        map.extend(iter);
        map
    }
}

impl<K, V, S> Extend<(K, V)> for CowMap<K, V, S>
where
    K: Hash + Eq + Clone,
    V: Clone,
    S: BuildHasher + Clone + Default,
{
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (key, value) in iter {
            self.insert(key, value);
        }
    }
}

/// Entries of a [`CowVec`] chunk: a write after a clone copies this many
/// (a node's cache entry holds its pods' keys, so a copy is not free).
pub const CHUNK: usize = 16;

/// A vector that clones in O(len / [`CHUNK`]).
pub struct CowVec<T> {
    /// Shared like [`CowMap`]'s shard list.
    chunks: Arc<Vec<Arc<Vec<T>>>>,
    len: usize,
}

impl<T> Clone for CowVec<T> {
    fn clone(&self) -> Self {
        Self {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }
}

impl<T> Default for CowVec<T> {
    fn default() -> Self {
        Self {
            chunks: Arc::new(Vec::new()),
            len: 0,
        }
    }
}

impl<T: Clone> CowVec<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len {
            return None;
        }
        self.chunks[index / CHUNK].get(index % CHUNK)
    }

    /// Copies the entry's chunk first if a clone shares it.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        if index >= self.len {
            return None;
        }
        Arc::make_mut(&mut Arc::make_mut(&mut self.chunks)[index / CHUNK]).get_mut(index % CHUNK)
    }

    pub fn push(&mut self, value: T) {
        let chunks = Arc::make_mut(&mut self.chunks);
        if self.len.is_multiple_of(CHUNK) {
            chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
        }
        let last = chunks.len() - 1;
        Arc::make_mut(&mut chunks[last]).push(value);
        self.len += 1;
    }

    /// Grows with `make()` or shrinks to `len`, as `Vec::resize_with`.
    pub fn resize_with(&mut self, len: usize, mut make: impl FnMut() -> T) {
        while self.len < len {
            self.push(make());
        }
        if self.len > len {
            let chunks = Arc::make_mut(&mut self.chunks);
            chunks.truncate(len.div_ceil(CHUNK));
            if !len.is_multiple_of(CHUNK) {
                let last = chunks.len() - 1;
                Arc::make_mut(&mut chunks[last]).truncate(len % CHUNK);
            }
            self.len = len;
        }
    }

    pub fn resize(&mut self, len: usize, value: T) {
        self.resize_with(len, || value.clone());
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }
}

impl<T: Clone> std::ops::Index<usize> for CowVec<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(value) => value,
            None => panic!("CowVec index {index} out of bounds (len {})", self.len),
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for CowVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.chunks.iter().flat_map(|chunk| chunk.iter()))
            .finish()
    }
}

impl<T: Clone> FromIterator<T> for CowVec<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut vec = Self::default();
        for value in iter {
            vec.push(value);
        }
        vec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_clone_is_independent_and_shares_untouched_shards() {
        let mut map: CowMap<String, u32> = (0..1_000).map(|i| (format!("pod-{i}"), i)).collect();
        assert_eq!(map.len(), 1_000);
        let snapshot = map.clone();
        *map.get_mut("pod-7").unwrap() = 70;
        map.insert("pod-new".into(), 1);
        assert_eq!(map.remove("pod-8"), Some(8));
        assert_eq!(map.remove("pod-absent"), None);
        map.retain(|_, v| *v != 9);

        assert_eq!(snapshot.get("pod-7"), Some(&7));
        assert_eq!(snapshot.get("pod-8"), Some(&8));
        assert_eq!(snapshot.get("pod-9"), Some(&9));
        assert_eq!(snapshot.get("pod-new"), None);
        assert_eq!(snapshot.len(), 1_000);
        assert_eq!(map.get("pod-7"), Some(&70));
        assert_eq!(map.get("pod-8"), None);
        assert_eq!(map.get("pod-9"), None);
        assert_eq!(map.len(), 1_000 + 1 - 2);
        assert_eq!(map.iter().count(), map.len());

        let shared = map
            .shards
            .iter()
            .zip(snapshot.shards.iter())
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        // At most four shards were written (pod-7, pod-new, pod-8, pod-9).
        assert!(shared >= SHARDS - 4, "only {shared} shards still shared");
    }

    #[test]
    fn map_reads_and_misses_copy_nothing() {
        let mut map: CowMap<String, u32> = (0..100).map(|i| (i.to_string(), i)).collect();
        let snapshot = map.clone();
        assert!(map.get_mut("missing").is_none());
        assert!(map.remove("missing").is_none());
        map.retain(|_, _| true);
        assert!(Arc::ptr_eq(&map.shards, &snapshot.shards));
        assert!(
            map.shards
                .iter()
                .zip(snapshot.shards.iter())
                .all(|(a, b)| Arc::ptr_eq(a, b))
        );
    }

    #[test]
    fn get_or_insert_with_counts_new_keys_only() {
        let mut map: CowMap<String, Vec<u32>> = CowMap::new();
        map.get_or_insert_with("a".into(), Vec::new).push(1);
        map.get_or_insert_with("a".into(), Vec::new).push(2);
        map.get_or_insert_with("b".into(), Vec::new).push(3);
        assert_eq!(map.len(), 2);
        assert_eq!(map.get("a"), Some(&vec![1, 2]));
        map.clear();
        assert!(map.is_empty());
        assert_eq!(map.iter().count(), 0);
    }

    #[test]
    fn keys_spread_over_shards() {
        let map: CowMap<String, ()> = (0..25_600).map(|i| (format!("node-{i}"), ())).collect();
        let largest = map.shards.iter().map(|s| s.len()).max().unwrap();
        // 100 per shard on average; a shard past 200 means the shard bits are not random.
        assert!(largest < 200, "largest shard holds {largest}");
    }

    #[test]
    fn a_vec_clone_is_independent_and_grows_and_shrinks() {
        let mut vec: CowVec<Option<u32>> = (0..200).map(Some).collect();
        let snapshot = vec.clone();
        *vec.get_mut(130).unwrap() = None;
        vec.resize(300, Some(1));
        assert_eq!(vec.len(), 300);
        assert_eq!(vec[299], Some(1));
        assert_eq!(snapshot.len(), 200);
        assert_eq!(snapshot[130], Some(130));
        assert_eq!(vec[130], None);
        assert!(Arc::ptr_eq(&vec.chunks[0], &snapshot.chunks[0]));
        vec.resize_with(65, || None);
        assert_eq!(vec.len(), 65);
        assert_eq!(vec.iter().count(), 65);
        assert_eq!(vec.get(65), None);
        assert_eq!(vec[64], Some(64));
        vec.push(Some(5));
        assert_eq!(vec[65], Some(5));
        assert_eq!(snapshot[65], Some(65));
    }
}
