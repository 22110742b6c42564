//! [`NodeMap`]: node name → value for a placement's per-node details.
//!
//! A simulation names every node for every pod (a rejection reason or a
//! score each). Keyed by name, that is one string (or reference count) per
//! node per pod and a tree node allocation per few entries. A `NodeMap`
//! keeps the nodes the cache knows by their position in one shared
//! [`NodeNames`] table (in name order), so recording 5,000 details is one
//! vector of (position, value) pairs, and names are read only when the map
//! is read or written out. Names the table lacks are kept by name.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::cache::{ClusterCache, NodeNames};

/// Node name → `V`, iterated and written in name order (a JSON object, as a
/// `BTreeMap<String, V>` would be).
#[derive(Clone)]
pub struct NodeMap<V> {
    names: Option<Arc<NodeNames>>,
    /// (position in `names`, value), sorted by position, positions unique.
    by_position: Vec<(u32, V)>,
    /// Nodes `names` does not hold (or every node, without `names`).
    by_name: BTreeMap<Arc<str>, V>,
}

impl<V> Default for NodeMap<V> {
    fn default() -> Self {
        Self {
            names: None,
            by_position: Vec::new(),
            by_name: BTreeMap::new(),
        }
    }
}

impl<V> NodeMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty map that keeps the cache's current nodes by position.
    pub fn for_nodes_of(cache: &ClusterCache) -> Self {
        Self {
            names: Some(cache.node_names()),
            ..Self::default()
        }
    }

    /// The map of `entries` by [`crate::cache::NodeInfo::index`] of `cache`;
    /// an index given twice keeps its later value, and an index the cache
    /// no longer has is left out.
    pub fn from_indexed(cache: &ClusterCache, entries: Vec<(usize, V)>) -> Self {
        let mut map = Self::for_nodes_of(cache);
        let names = map.names.clone().expect("set by for_nodes_of");
        let mut by_position = Vec::with_capacity(entries.len());
        for (index, value) in entries {
            match names.position_of_index(index) {
                Some(position) => by_position.push((position, value)),
                None => {
                    if let Some(name) = cache.node_name_at(index) {
                        map.by_name.insert(Arc::clone(name), value);
                    }
                }
            }
        }
        // Stable, so among equal positions the later value comes last.
        by_position.sort_by_key(|(position, _)| *position);
        let mut deduplicated: Vec<(u32, V)> = Vec::with_capacity(by_position.len());
        for (position, value) in by_position {
            match deduplicated.last_mut() {
                Some(last) if last.0 == position => last.1 = value,
                _ => deduplicated.push((position, value)),
            }
        }
        map.by_position = deduplicated;
        map
    }

    fn position_of(&self, name: &str) -> Option<u32> {
        self.names.as_ref()?.position_of(name)
    }

    fn find(&self, position: u32) -> Result<usize, usize> {
        self.by_position
            .binary_search_by_key(&position, |(p, _)| *p)
    }

    pub fn get(&self, name: &str) -> Option<&V> {
        match self.position_of(name) {
            Some(position) => self.find(position).ok().map(|i| &self.by_position[i].1),
            None => self.by_name.get(name),
        }
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name`'s value; returns the one it replaces.
    pub fn insert(&mut self, name: impl AsRef<str> + Into<Arc<str>>, value: V) -> Option<V> {
        match self.position_of(name.as_ref()) {
            Some(position) => match self.find(position) {
                Ok(i) => Some(std::mem::replace(&mut self.by_position[i].1, value)),
                Err(i) => {
                    self.by_position.insert(i, (position, value));
                    None
                }
            },
            None => self.by_name.insert(name.into(), value),
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<V> {
        match self.position_of(name) {
            Some(position) => self
                .find(position)
                .ok()
                .map(|i| self.by_position.remove(i).1),
            None => self.by_name.remove(name),
        }
    }

    pub fn len(&self) -> usize {
        self.by_position.len() + self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        let positioned = self.by_position.iter().map(|(position, value)| {
            let names = self.names.as_ref().expect("positions come with names");
            (&**names.name(*position), value)
        });
        let named = self.by_name.iter().map(|(name, value)| (&**name, value));
        MergeByName {
            left: positioned.peekable(),
            right: named.peekable(),
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().map(|(name, _)| name)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, value)| value)
    }
}

/// Two name-ordered iterators as one (no name is in both).
struct MergeByName<L: Iterator, R: Iterator> {
    left: std::iter::Peekable<L>,
    right: std::iter::Peekable<R>,
}

impl<'a, V: 'a, L, R> Iterator for MergeByName<L, R>
where
    L: Iterator<Item = (&'a str, &'a V)>,
    R: Iterator<Item = (&'a str, &'a V)>,
{
    type Item = (&'a str, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        match (self.left.peek(), self.right.peek()) {
            (Some((l, _)), Some((r, _))) if r < l => self.right.next(),
            (Some(_), _) => self.left.next(),
            (None, _) => self.right.next(),
        }
    }
}

impl<V, K: AsRef<str> + Into<Arc<str>>> Extend<(K, V)> for NodeMap<V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, entries: I) {
        for (name, value) in entries {
            self.insert(name, value);
        }
    }
}

impl<V, K: AsRef<str> + Into<Arc<str>>> FromIterator<(K, V)> for NodeMap<V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut map = Self::new();
        map.extend(entries);
        map
    }
}

impl<V> std::ops::Index<&str> for NodeMap<V> {
    type Output = V;

    fn index(&self, name: &str) -> &V {
        self.get(name)
            .unwrap_or_else(|| panic!("no entry for node {name}"))
    }
}

/// Equal when they hold the same names with equal values, however kept.
impl<V: PartialEq> PartialEq for NodeMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<V: fmt::Debug> fmt::Debug for NodeMap<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: Serialize> Serialize for NodeMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (name, value) in self.iter() {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{Change, Object};
    use crate::testutil::node;

    fn cache_of(names: &[&str]) -> ClusterCache {
        let mut cache = ClusterCache::new();
        for name in names {
            let Object::Node(n) = node(name, &[("cpu", "1")]) else {
                unreachable!()
            };
            cache.apply(Change::Upsert(Object::Node(n)));
        }
        cache
    }

    fn index_of(cache: &ClusterCache, name: &str) -> usize {
        cache.node(name).unwrap().index
    }

    /// A `NodeMap` must read as the `BTreeMap` the same inserts, removals
    /// and indexed entries make, whichever way each node is kept.
    #[test]
    fn reads_as_the_btreemap_of_the_same_writes() {
        // Added out of name order, so indexes and name order differ.
        let cache = cache_of(&["n3", "n1", "n4", "n2"]);
        let indexed = vec![
            (index_of(&cache, "n4"), 4),
            (index_of(&cache, "n1"), 1),
            (index_of(&cache, "n4"), 40),
        ];
        let mut map = NodeMap::from_indexed(&cache, indexed);
        let mut want: BTreeMap<String, i32> = [("n1".into(), 1), ("n4".into(), 40)].into();
        assert_eq!(map.iter().collect::<Vec<_>>(), [("n1", &1), ("n4", &40)]);
        for (name, value) in [("n2", 2), ("", 0), ("zz", 9), ("n1", 10), ("a", 5)] {
            assert_eq!(map.insert(name, value), want.insert(name.into(), value));
        }
        assert_eq!(map.remove("n4"), want.remove("n4"));
        assert_eq!(map.remove("zz"), want.remove("zz"));
        assert_eq!(map.remove("n3"), None);
        let got: Vec<(String, i32)> = map.iter().map(|(n, v)| (n.to_string(), *v)).collect();
        assert_eq!(got, want.clone().into_iter().collect::<Vec<_>>());
        assert_eq!(map.len(), want.len());
        assert_eq!(map["n1"], 10);
        assert!(map.contains_key("") && !map.contains_key("n3"));
        assert_eq!(
            serde_json::to_string(&map).unwrap(),
            serde_json::to_string(&want).unwrap()
        );
        // Kept by name only, the same entries compare equal.
        let by_name: NodeMap<i32> = want.clone().into_iter().collect();
        assert_eq!(map, by_name);
        assert_eq!(format!("{map:?}"), format!("{want:?}"));
    }

    #[test]
    fn a_node_added_after_the_map_is_kept_by_name() {
        let mut cache = cache_of(&["n1"]);
        let mut map = NodeMap::for_nodes_of(&cache);
        let Object::Node(n) = node("n0", &[("cpu", "1")]) else {
            unreachable!()
        };
        cache.apply(Change::Upsert(Object::Node(n)));
        map.insert("n1", "b");
        map.insert("n0", "a");
        assert_eq!(map.keys().collect::<Vec<_>>(), ["n0", "n1"]);
        // The cache's new table has n0 first; the map kept its own.
        assert_eq!(
            NodeMap::from_indexed(&cache, vec![(index_of(&cache, "n0"), "a")])
                .keys()
                .collect::<Vec<_>>(),
            ["n0"]
        );
    }
}
