//! Binding threads and memory to the machine (crate-private).
//!
//! Threads are bound with `sched_setaffinity` (Linux; elsewhere `ErrorKind::Unsupported`);
//! memory with hwloc's area memory binding through [`MemBinder`] (feature `hwloc`; without
//! it nothing is bound). Binding only makes sense for a topology of this very machine
//! ([`Topology::is_this_machine`](super::Topology::is_this_machine)): the caller checks that
//! before binding anything, since the PU and zone numbers of a synthetic or fallback
//! topology need not exist here.

use std::io;

/// Bits in one word of a CPU mask.
#[cfg(target_os = "linux")]
const WORD_BITS: usize = 8 * std::mem::size_of::<libc::c_ulong>();

/// Binds the calling thread to the PUs `pus` (OS indices, as in [`Core::pus`]): it will run
/// only on them. An empty list is `ErrorKind::InvalidInput`; a PU the process may not use
/// is the OS's error (`EINVAL`).
///
/// [`Core::pus`]: super::Core::pus
#[cfg(target_os = "linux")]
pub(crate) fn bind_current_thread(pus: &[u32]) -> io::Result<()> {
    let Some(&max) = pus.iter().max() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no processing unit to bind to",
        ));
    };
    // At least glibc's cpu_set_t (1024 CPUs), more if a PU lies beyond it.
    let words = (max as usize / WORD_BITS + 1).max(1024 / WORD_BITS);
    let mut mask: Vec<libc::c_ulong> = vec![0; words];
    for &pu in pus {
        mask[pu as usize / WORD_BITS] |= 1 << (pu as usize % WORD_BITS);
    }
    // SAFETY: `mask` is `words` initialised words, and the size passed is its size in
    // bytes; pid 0 is the calling thread.
    let rc = unsafe {
        libc::sched_setaffinity(
            0,
            std::mem::size_of_val(mask.as_slice()),
            mask.as_ptr().cast::<libc::cpu_set_t>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Binds the calling thread to the PUs `pus`: unsupported off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn bind_current_thread(_pus: &[u32]) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "thread binding is only implemented on Linux",
    ))
}

/// The PUs (OS indices, ascending) the calling thread may run on, from `sched_getaffinity`.
#[cfg(target_os = "linux")]
pub(crate) fn current_affinity() -> io::Result<Vec<u32>> {
    // Start at glibc's cpu_set_t size and grow while the kernel's mask is larger (EINVAL).
    let mut words = 1024 / WORD_BITS;
    loop {
        let mut mask: Vec<libc::c_ulong> = vec![0; words];
        // SAFETY: `mask` is `words` writable words, and the size passed is its size in
        // bytes; pid 0 is the calling thread.
        let rc = unsafe {
            libc::sched_getaffinity(
                0,
                std::mem::size_of_val(mask.as_slice()),
                mask.as_mut_ptr().cast::<libc::cpu_set_t>(),
            )
        };
        if rc == 0 {
            let pus = mask
                .iter()
                .enumerate()
                .flat_map(|(w, &bits)| {
                    (0..WORD_BITS)
                        .filter(move |b| bits & (1 << b) != 0)
                        .map(move |b| (w * WORD_BITS + b) as u32)
                })
                .collect();
            return Ok(pus);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINVAL) && words < (1 << 20) {
            words *= 2;
        } else {
            return Err(err);
        }
    }
}

/// The PUs the calling thread may run on: unsupported off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn current_affinity() -> io::Result<Vec<u32>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "reading the thread affinity is only implemented on Linux",
    ))
}

/// Binds memory ranges to NUMA nodes of this machine. Create it once (with the `hwloc`
/// feature it probes the machine with hwloc, which takes milliseconds) and share it; it
/// is `Send + Sync`. Without the feature, or where hwloc cannot probe the machine, it
/// binds nothing.
///
/// Use it only with zones of a [`TopologySource::ThisMachine`](super::TopologySource)
/// topology (the caller checks `Topology::is_this_machine`).
///
/// The store binds the process arena with it, chunk by chunk, before the arena's first
/// touch. Worker memory needs no binder: the pinned owner thread touches it first.
pub(crate) struct MemBinder {
    /// hwloc's view of this machine, if it could be probed.
    #[cfg(feature = "hwloc")]
    hw: Option<hwlocality::Topology>,
}

impl MemBinder {
    /// A binder for this machine.
    pub(crate) fn new() -> Self {
        MemBinder {
            #[cfg(feature = "hwloc")]
            hw: hwlocality::Topology::new().ok(),
        }
    }

    /// Whether [`bind_area`](Self::bind_area) can take effect: hwloc is present and says
    /// this machine supports binding a memory area with the Bind policy.
    pub(crate) fn supports_area_binding(&self) -> bool {
        #[cfg(feature = "hwloc")]
        {
            use hwlocality::topology::support::{FeatureSupport, MemoryBindingSupport};
            self.hw.as_ref().is_some_and(|hw| {
                hw.supports(
                    FeatureSupport::memory_binding,
                    MemoryBindingSupport::set_area,
                ) && hw.supports(
                    FeatureSupport::memory_binding,
                    MemoryBindingSupport::bind_policy,
                )
            })
        }
        #[cfg(not(feature = "hwloc"))]
        false
    }

    /// Binds the pages holding `bytes` to the NUMA node with OS index `zone_os_index`
    /// (policy Bind). Pages already touched elsewhere are migrated only where hwloc and
    /// `hwlocality` allow it (today's `hwlocality` does not for areas), so bind before
    /// first touch. Binding works on whole pages, so memory sharing a page with `bytes` is bound
    /// too: pass page-aligned buffers. Returns whether it bound; an unsupported machine,
    /// an unknown node or an OS refusal is `false`, never an error or a panic.
    pub(crate) fn bind_area<T>(&self, bytes: &[T], zone_os_index: u32) -> bool {
        #[cfg(feature = "hwloc")]
        {
            use hwlocality::memory::binding::{MemoryBindingFlags, MemoryBindingPolicy};
            use hwlocality::memory::nodeset::NodeSet;
            use hwlocality::topology::support::{FeatureSupport, MemoryBindingSupport};

            if bytes.is_empty() || !self.supports_area_binding() {
                return false;
            }
            let Some(hw) = self.hw.as_ref() else {
                return false;
            };
            let Ok(node) = hwlocality::bitmap::BitmapIndex::try_from(zone_os_index as usize) else {
                return false;
            };
            let nodes = NodeSet::from(node);
            let migrate = hw.supports(
                FeatureSupport::memory_binding,
                MemoryBindingSupport::migrate_flag,
            );
            // hwlocality validates the set and flags and maps OS errors to `Err`; the
            // guard only keeps an unexpected hwloc answer from unwinding into the caller.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let bind = |flags| {
                    hw.bind_memory_area::<[T], _>(bytes, &nodes, MemoryBindingPolicy::Bind, flags)
                };
                // hwlocality 1.0.0-alpha.13 refuses MIGRATE for areas (`BadFlags`) although
                // hwloc accepts it; ask for it, and bind without it when refused.
                if migrate && bind(MemoryBindingFlags::MIGRATE).is_ok() {
                    return true;
                }
                bind(MemoryBindingFlags::empty()).is_ok()
            }))
            .unwrap_or(false)
        }
        #[cfg(not(feature = "hwloc"))]
        {
            let _ = (bytes, zone_os_index);
            self.supports_area_binding() // always false without hwloc
        }
    }
}

/// Spawns a thread named `name` that first binds itself to the processing units `pus`
/// (when given) and then runs `body`; the thread ends with what `body` returns (`None`
/// only when it did not run). Returns once the binding has succeeded; a binding the kernel
/// refuses is an error naming the thread and the CPUs, and the thread then ends without
/// running `body`.
pub(crate) fn spawn_bound<T: Send + 'static>(
    name: String,
    pus: Option<Vec<u32>>,
    body: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<Option<T>>> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<()>>(1);
    let thread = name.clone();
    let handle = std::thread::Builder::new().name(name).spawn(move || {
        let bound = pus.as_deref().map_or(Ok(()), bind_current_thread);
        let ok = bound.is_ok();
        let _ = tx.send(bound);
        ok.then(body)
    })?;
    match rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(io::Error::new(e.kind(), format!("binding {thread}: {e}")))
        }
        Err(_) => Err(io::Error::other(format!("{thread} ended before binding"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn a_bound_thread_reports_its_one_pu() {
        let n = std::thread::available_parallelism().unwrap().get() as u32;
        let pu = n - 1;
        let got = std::thread::spawn(move || {
            bind_current_thread(&[pu]).unwrap();
            current_affinity().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(got, vec![pu]);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn binding_to_nothing_is_invalid_input() {
        let err = bind_current_thread(&[]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn bind_area_on_a_page_aligned_buffer_returns() {
        let binder = MemBinder::new();
        if cfg!(not(feature = "hwloc")) {
            assert!(!binder.supports_area_binding());
        }
        // Two pages, page-aligned: a 4 KiB-aligned slice of a larger buffer.
        let page = 4096;
        let buf = vec![0u8; 4 * page];
        let start = buf.as_ptr().align_offset(page);
        let area = &buf[start..start + 2 * page];
        let bound = binder.bind_area(area, 0);
        assert!(!bound || binder.supports_area_binding());
        // An unknown node is refused, not an error.
        assert!(!binder.bind_area(area, 1 << 20));
        assert!(!binder.bind_area::<u8>(&[], 0));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn spawn_bound_binds_before_the_body_and_names_a_refusal() {
        let n = std::thread::available_parallelism().unwrap().get() as u32;
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = spawn_bound("bound-test".into(), Some(vec![n - 1]), move || {
            tx.send(current_affinity().unwrap()).unwrap();
        })
        .unwrap();
        handle.join().unwrap();
        assert_eq!(rx.recv().unwrap(), vec![n - 1]);
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let err = spawn_bound("cpu-test".into(), Some(vec![100_000]), move || {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .unwrap_err();
        assert!(err.to_string().starts_with("binding cpu-test: "), "{err}");
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        // Without CPUs the thread simply runs.
        spawn_bound("free".into(), None, || {})
            .unwrap()
            .join()
            .unwrap();
    }
}
