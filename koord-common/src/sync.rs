//! Locks taken past a poisoned state.
//!
//! A std lock is poisoned when a thread panics while holding it. Everything
//! this project keeps behind a std lock (caches, counters, registries,
//! published snapshots) is whole between statements, so a panic elsewhere
//! must not make every later reader panic too or take the component down:
//! the guard is taken anyway. One helper, so the choice is made in one
//! place and greppable.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], recovering the guard of a poisoned mutex.
/// [`Mutex::get_mut`] likewise.
pub trait MutexExt<T: ?Sized> {
    fn lock_or_recover(&self) -> MutexGuard<'_, T>;
    fn get_mut_or_recover(&mut self) -> &mut T;
}

impl<T: ?Sized> MutexExt<T> for Mutex<T> {
    fn lock_or_recover(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get_mut_or_recover(&mut self) -> &mut T {
        self.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`RwLock::read`] and [`RwLock::write`], recovering the guard of a
/// poisoned lock.
pub trait RwLockExt<T: ?Sized> {
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T>;
    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_or_recover(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_or_recover(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let mutex = Arc::new(Mutex::new(1));
        let lock = Arc::new(RwLock::new(2));
        let (held_mutex, held_lock) = (Arc::clone(&mutex), Arc::clone(&lock));
        let panicked = std::thread::spawn(move || {
            let _mutex = held_mutex.lock().unwrap();
            let _lock = held_lock.write().unwrap();
            panic!("poison both");
        })
        .join();
        assert!(panicked.is_err());
        assert!(mutex.is_poisoned() && lock.is_poisoned());
        *mutex.lock_or_recover() += 1;
        assert_eq!(*mutex.lock_or_recover(), 2);
        let mut owned = Arc::into_inner(mutex).unwrap();
        *owned.get_mut_or_recover() += 1;
        assert_eq!(
            owned.into_inner().unwrap_or_else(PoisonError::into_inner),
            3
        );
        *lock.write_or_recover() += 1;
        assert_eq!(*lock.read_or_recover(), 3);
    }
}
