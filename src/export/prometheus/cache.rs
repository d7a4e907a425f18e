//! The encoded exposition, kept until the store changes.
//!
//! Every series on `/metrics` comes from the [`Store`]; nothing is computed at scrape
//! time. So two scrapes between the same two store changes get the same bytes, and
//! encoding them once serves every scraper in between: with many scrapers (or an
//! attacker who scrapes flat out) the daemon copies a reference to a buffer instead of
//! formatting 50 KB of text per request. The store's generation says when the bytes are
//! stale.
//!
//! One slot per (format, compression): Prometheus asks for gzip, curl and most load
//! generators do not. A slot is filled under its own lock, so when the store changes and
//! a thousand scrapes arrive at once, one of them encodes and the others wait for it
//! instead of all encoding the same text.

use std::io::Write as _;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use prometheus_client::registry::Registry;

use super::Format;
use crate::snapshot::Store;

/// Why an exposition could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// A collector failed to format its families.
    #[error("encoding the exposition failed: {0}")]
    Format(#[from] std::fmt::Error),
    /// Compressing it failed.
    #[error("compressing the exposition failed: {0}")]
    Gzip(#[from] std::io::Error),
}

/// What one slot holds: the bytes encoded at a store generation, once encoded.
type Slot = Option<(u64, Bytes)>;

/// The registry over the store, and its last encodings.
pub struct ExpositionCache {
    registry: Registry,
    store: Arc<Store>,
    /// Indexed by [`slot_index`].
    slots: [Mutex<Slot>; 4],
}

impl std::fmt::Debug for ExpositionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpositionCache")
            .field("generation", &self.store.generation())
            .finish_non_exhaustive()
    }
}

fn slot_index(format: Format, gzip: bool) -> usize {
    let f = match format {
        Format::Text004 => 0,
        Format::OpenMetrics => 1,
    };
    f * 2 + usize::from(gzip)
}

impl ExpositionCache {
    /// A cache over `registry`, whose collectors read `store`.
    pub fn new(registry: Registry, store: Arc<Store>) -> Self {
        Self {
            registry,
            store,
            slots: Default::default(),
        }
    }

    /// The exposition in `format`, gzip-compressed when `gzip`: the cached bytes when the
    /// store has not changed since they were encoded, else freshly encoded ones.
    pub fn get(&self, format: Format, gzip: bool) -> Result<Bytes, EncodeError> {
        self.slot(format, gzip).map(|(_, bytes)| bytes)
    }

    /// The slot's bytes and the generation they are filed under, filled when stale. The
    /// gzip slot compresses the plain slot's bytes (one encoding per change, not two).
    fn slot(&self, format: Format, gzip: bool) -> Result<(u64, Bytes), EncodeError> {
        let mut slot = self.slots[slot_index(format, gzip)]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Read before encoding: the parts the collectors read afterwards are at least
        // this new, so the bytes are never older than the generation they are filed under.
        let generation = self.store.generation();
        if let Some((g, bytes)) = &*slot
            && *g >= generation
        {
            return Ok((*g, bytes.clone()));
        }
        let (generation, bytes) = if gzip {
            let (g, text) = self.slot(format, false)?;
            let mut z = flate2::write::GzEncoder::new(
                Vec::with_capacity(text.len() / 8),
                flate2::Compression::fast(),
            );
            z.write_all(&text)?;
            (g, Bytes::from(z.finish()?))
        } else {
            (
                generation,
                Bytes::from(super::encode(&self.registry, format)?),
            )
        };
        *slot = Some((generation, bytes.clone()));
        Ok((generation, bytes))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;
    use crate::snapshot::npu::NpuSnapshot;
    use crate::snapshot::status::BuildInfo;

    fn cache() -> (Arc<Store>, ExpositionCache) {
        let store = crate::snapshot::fixture::store(2);
        let build = BuildInfo::current();
        let registry = super::super::registry(store.clone(), build);
        (store.clone(), ExpositionCache::new(registry, store))
    }

    fn text(c: &ExpositionCache) -> String {
        String::from_utf8(c.get(Format::Text004, false).unwrap().to_vec()).unwrap()
    }

    /// Unchanged store: the same buffer (not only equal bytes) is served again.
    #[test]
    fn an_unchanged_store_is_served_from_the_cache() {
        let (_, c) = cache();
        let a = c.get(Format::Text004, false).unwrap();
        let b = c.get(Format::Text004, false).unwrap();
        assert_eq!(a.as_ptr(), b.as_ptr(), "the second scrape re-encoded");
    }

    fn gunzip(b: &[u8]) -> String {
        let mut s = String::new();
        flate2::read::GzDecoder::new(b)
            .read_to_string(&mut s)
            .unwrap();
        s
    }

    /// Any publish makes the next scrape show it, in every slot: here the NPU part is
    /// replaced by an empty one, so the chip series the fixture had must be gone.
    #[test]
    fn a_publish_invalidates_every_slot() {
        let (store, c) = cache();
        let all = |c: &ExpositionCache| {
            [
                text(c),
                gunzip(&c.get(Format::Text004, true).unwrap()),
                String::from_utf8(c.get(Format::OpenMetrics, false).unwrap().to_vec()).unwrap(),
                gunzip(&c.get(Format::OpenMetrics, true).unwrap()),
            ]
        };
        for before in all(&c) {
            assert!(before.contains("hcclwatch_npu_temperature_celsius{"));
        }
        store.publish_npu(NpuSnapshot::default());
        for after in all(&c) {
            assert!(
                !after.contains("hcclwatch_npu_temperature_celsius{"),
                "a stale exposition was served after the NPU part changed"
            );
        }
    }

    /// Readiness changes count as changes too (they feed status series).
    #[test]
    fn readiness_changes_move_the_generation() {
        let (store, _) = cache();
        let g = store.generation();
        store.set_not_ready("probe", "port in use".into());
        assert!(store.generation() > g);
        let g = store.generation();
        store.set_ready("probe");
        assert!(store.generation() > g);
    }

    /// The gzip slot holds the same exposition, compressed; each format has its own.
    #[test]
    fn gzip_and_formats_have_their_own_slots() {
        let (_, c) = cache();
        let plain = c.get(Format::Text004, false).unwrap();
        let unzipped = gunzip(&c.get(Format::Text004, true).unwrap());
        assert_eq!(unzipped.as_bytes(), &plain[..]);
        let om = c.get(Format::OpenMetrics, false).unwrap();
        assert!(om.ends_with(b"# EOF\n"), "OpenMetrics ends with # EOF");
        assert!(!plain.ends_with(b"# EOF\n"));
    }
}
