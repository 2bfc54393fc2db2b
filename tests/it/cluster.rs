//! Clusters of several processes: coordination across processes (tables by name, all
//! gathers, run barriers), and what happens when a process fails, leaves early, is
//! configured differently or never comes — always an error naming it, never a hang.

use crate::util::{free_addrs, within};
use iterstore::deploy::{Membership, Secret};
use iterstore::{Cluster, Config, Error};
use std::time::{Duration, Instant};

fn secret() -> Secret {
    Secret::new(b"a test secret of enough bytes".to_vec()).unwrap()
}

#[test]
fn tables_get_one_id_per_name_and_all_gathers_see_every_process() {
    let got = within(30, || {
        Cluster::run_local_processes(Config::new(2), 3, |c| {
            let a = c.create_table::<i64>("a", 1)?;
            let b = c.create_table::<f32>("b", 2)?;
            c.run(|w| {
                w.update(&a, 0, &[w.id() as i64])?;
                w.update(&b, w.id() as u64, &[1.0, 2.0])?;
                w.clock()
            })?;
            let sums = c.all_gather(&[c.rank() as i64 * 10, c.total_workers() as i64])?;
            Ok((c.snapshot(&a)?, c.snapshot(&b)?.len(), sums))
        })
        .unwrap()
    });
    for (rank, (a, b_rows, sums)) in got.iter().enumerate() {
        assert_eq!(a, &vec![(0, vec![15])], "process {rank}: 0 + 1 + ... + 5");
        assert_eq!(*b_rows, 6);
        assert_eq!(sums, &vec![vec![0, 6], vec![10, 6], vec![20, 6]]);
    }
}

#[test]
fn tables_created_in_another_order_are_refused_by_name() {
    let err = within(30, || {
        Cluster::run_local_processes(Config::new(1), 2, |c| {
            let names = if c.rank() == 0 {
                ["x", "y"]
            } else {
                ["y", "x"]
            };
            for n in names {
                c.create_table::<i64>(n, 1)?;
            }
            Ok(())
        })
        .unwrap_err()
    });
    assert!(err.to_string().contains("same order"), "{err}");
}

#[test]
fn a_process_that_fails_wakes_the_others_waiting_on_its_coordinator() {
    // Rank 0 hosts the coordinator and fails at once; rank 1 asks for an all-gather after
    // the coordinator has stopped with the failed process, and must fail with the cause
    // at once rather than wait for an answer that cannot come. (Without being told, it
    // learned only after a send's 10 s loss-report bound, or a wait's 60 s.)
    for _ in 0..5 {
        let err = within(5, || {
            Cluster::run_local_processes(Config::new(1), 2, |c| {
                if c.rank() == 0 {
                    return Err(Error::app(0, std::io::Error::other("rank 0 gave up")));
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
                c.agree(&[("x", "1")])
            })
            .unwrap_err()
        });
        assert!(err.to_string().contains("rank 0 gave up"), "{err}");
    }
}

#[test]
fn a_process_that_fails_makes_the_others_fail_instead_of_waiting() {
    let err = within(30, || {
        Cluster::run_local_processes(Config::new(1), 2, |c| {
            let t = c.create_table::<i64>("t", 1)?;
            if c.rank() == 1 {
                return Err(Error::app(0, std::io::Error::other("the app gave up")));
            }
            for _ in 0..3 {
                c.run(|w| {
                    w.update(&t, 0, &[1])?;
                    w.clock()
                })?;
            }
            Ok(())
        })
        .unwrap_err()
    });
    assert!(
        err.to_string().contains("the app gave up"),
        "the cause, not its echo: {err}"
    );
}

#[test]
fn a_process_that_leaves_early_over_tcp_fails_the_others_naming_it() {
    let hosts = free_addrs(2);
    let results: Vec<iterstore::Result<()>> = within(60, move || {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|rank| {
                    let config = Config::new(1).with_membership(Membership::new(
                        rank,
                        hosts.clone(),
                        secret(),
                    ));
                    s.spawn(move || -> iterstore::Result<()> {
                        let mut c = Cluster::start(config)?;
                        let t = c.create_table::<i64>("t", 1)?;
                        let runs = if rank == 1 { 1 } else { 3 };
                        for _ in 0..runs {
                            c.run(|w| {
                                w.update(&t, 0, &[1])?;
                                w.clock()
                            })?;
                        }
                        c.shutdown()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    });
    let err = results[0].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("process 1 left the cluster after run 1"),
        "{err}"
    );
}

#[test]
fn a_shutdown_kept_waiting_names_the_processes_that_did_not_leave() {
    let hosts = free_addrs(2);
    let results: Vec<iterstore::Result<()>> = within(60, move || {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|rank| {
                    let mut m = Membership::new(rank, hosts.clone(), secret());
                    m.shutdown_timeout = std::time::Duration::from_millis(500);
                    let config = Config::new(1).with_membership(m);
                    s.spawn(move || -> iterstore::Result<()> {
                        let mut c = Cluster::start(config)?;
                        let t = c.create_table::<i64>("t", 1)?;
                        c.run(|w| {
                            w.update(&t, 0, &[1])?;
                            w.clock()
                        })?;
                        if rank == 1 {
                            // Alive and connected, but not leaving for a while.
                            std::thread::sleep(std::time::Duration::from_secs(2));
                        }
                        c.shutdown()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    });
    let err = results[0].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("server shard 0 (process 0)")
            && err.contains("process(es) 1 did not leave it within 0.5 s"),
        "{err}"
    );
}

#[test]
fn a_process_with_other_settings_is_refused_before_any_work() {
    let hosts = free_addrs(2);
    let results: Vec<String> = within(60, move || {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|rank| {
                    let mut m = Membership::new(rank, hosts.clone(), secret());
                    m.connect_timeout = Duration::from_secs(3);
                    // Rank 1 runs with two workers, rank 0 with one.
                    let config = Config::new(1 + rank).with_membership(m);
                    s.spawn(move || Cluster::start(config).map(|_| ()).unwrap_err().to_string())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    });
    // Both processes fail, each naming the setting and every rank's value.
    for e in &results {
        assert!(
            e.contains("run with different settings: workers differs (rank 0: 1; rank 1: 2)"),
            "{results:?}"
        );
    }
}

#[test]
fn a_process_that_never_comes_is_named_after_the_connect_timeout() {
    let hosts = free_addrs(2);
    let mut m = Membership::new(0, hosts.clone(), secret());
    m.connect_timeout = Duration::from_secs(1);
    let started = Instant::now();
    let err = within(30, move || {
        Cluster::start(Config::new(1).with_membership(m)).unwrap_err()
    });
    let text = err.to_string();
    assert!(text.contains(&format!("rank 1 at {}", hosts[1])), "{text}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_wrong_secret_is_refused() {
    let hosts = free_addrs(2);
    let results: Vec<iterstore::Result<()>> = within(60, move || {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|rank| {
                    let key = if rank == 0 {
                        secret()
                    } else {
                        Secret::new(b"another secret of many bytes".to_vec()).unwrap()
                    };
                    let mut m = Membership::new(rank, hosts.clone(), key);
                    m.connect_timeout = Duration::from_secs(2);
                    s.spawn(move || Cluster::start(Config::new(1).with_membership(m)).map(|_| ()))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    });
    let errs: Vec<String> = results
        .iter()
        .map(|r| r.as_ref().unwrap_err().to_string())
        .collect();
    assert!(errs.iter().any(|e| e.contains("secret")), "{errs:?}");
}

#[test]
fn processes_on_one_machine_pin_their_workers_to_different_cores() {
    let config = Config::new(1).with_mode(iterstore::Mode::Virtual);
    let cores = within(60, move || {
        crate::util::over_tcp(config, 2, |c| {
            let numa = c.numa().expect("virtual mode with numa on");
            Ok((numa.worker_cores.clone(), numa.bound))
        })
    });
    let machine_cores: usize = iterstore::machine::Topology::detect()
        .zones()
        .iter()
        .map(|z| z.cores.len())
        .sum();
    if machine_cores >= 2 {
        assert_ne!(cores[0].0, cores[1].0, "{cores:?}");
    }
    assert_eq!(cores[0].0, vec![0], "{cores:?}");
}

/// Per process: each row's home process, the table's final contents, the rows locality
/// placement moved, and how many times rows holding values migrated.
type Seen = (Vec<usize>, Vec<(u64, Vec<i64>)>, usize, u32);

/// What each process sees when its workers each update and read only their own rows.
fn own_rows(placement: bool) -> Vec<Seen> {
    own_rows_in(iterstore::Mode::Virtual, placement)
}

/// [`own_rows`] in `mode`.
fn own_rows_in(mode: iterstore::Mode, placement: bool) -> Vec<Seen> {
    let mut specs = iterstore::Specializations::ALL;
    specs.placement = placement;
    let config = Config::new(2).with_mode(mode).with_specializations(specs);
    within(60, move || {
        Cluster::run_local_processes(config, 2, |c| {
            let t = c.create_table::<i64>("t", 1)?;
            // Worker w uses rows 10w..10w+10 only.
            let body = |w: &mut iterstore::Worker<'_>| {
                let mut v = [0i64];
                for r in 0..10 {
                    let row = 10 * w.id() as u64 + r;
                    w.read(&t, row, &mut v)?;
                    w.update(&t, row, &[v[0] + 1])?;
                }
                w.clock()
            };
            if mode == iterstore::Mode::Virtual {
                c.virtual_iteration(body)?;
            }
            for _ in 0..3 {
                c.run(body)?;
            }
            let homes = (0..40)
                .map(|r| c.home_of(&t, r))
                .collect::<iterstore::Result<_>>()?;
            let stats = c.stats();
            Ok((homes, c.snapshot(&t)?, stats.placed_rows, stats.migrations))
        })
        .unwrap()
    })
}

#[test]
fn locality_placement_puts_rows_on_the_process_that_uses_them_and_changes_no_answer() {
    let placed = own_rows(true);
    // Rows 0..20 belong to process 0's workers (0 and 1), 20..40 to process 1's.
    let homes = &placed[0].0;
    assert!(homes[..20].iter().all(|&h| h == 0), "{homes:?}");
    assert!(homes[20..].iter().all(|&h| h == 1), "{homes:?}");
    assert_eq!(
        placed[1].0, placed[0].0,
        "both processes agree on the placement"
    );
    assert!(placed[0].2 > 0, "some rows moved off their hash shard");
    let hashed = own_rows(false);
    assert_eq!(hashed[0].2, 0);
    assert!(hashed[0].0[..20].contains(&1), "the hash spreads rows");
    // The same values either way: placement changes where rows live, not what they hold.
    assert_eq!(placed[0].1, hashed[0].1);
    assert_eq!(placed[0].1.len(), 40);
    assert_eq!(
        placed[0].3, 0,
        "placed before any value existed: nothing migrated"
    );
}

#[test]
fn first_iter_placement_moves_rows_holding_values_and_loses_nothing() {
    // The first run is generic and recorded; then the rows, which hold its values, move
    // to the process that uses them, and the next two runs are specialized.
    let moved = own_rows_in(iterstore::Mode::FirstIter, true);
    let virtual_placed = own_rows(true);
    for (rank, seen) in moved.iter().enumerate() {
        assert_eq!(seen.3, 1, "process {rank} migrated once");
        assert_eq!(
            seen.0, virtual_placed[0].0,
            "process {rank}: the same homes"
        );
        assert!(seen.2 > 0);
    }
    // Each run adds one more than the row held (0, 1, 3, 7), whatever shard held it when.
    assert_eq!(moved[0].1, virtual_placed[0].1);
    assert!(
        moved[0].1.iter().all(|(_, v)| v == &[7]),
        "{:?}",
        moved[0].1
    );
    let unplaced = own_rows_in(iterstore::Mode::FirstIter, false);
    assert_eq!(unplaced[0].3, 0);
    assert_eq!(unplaced[0].1, moved[0].1);
}

#[test]
fn network_traffic_is_counted_by_kind_of_message() {
    let config = Config::new(1).with_mode(iterstore::Mode::Virtual);
    let seen = within(60, move || {
        crate::util::over_tcp(config, 2, |c| {
            let t = c.create_table::<i64>("t", 1)?;
            let body = |w: &mut iterstore::Worker<'_>| {
                let mut v = [0i64];
                for r in 0..20 {
                    w.read(&t, r, &mut v)?;
                    w.update(&t, r, &[1])?;
                }
                w.clock()
            };
            c.virtual_iteration(body)?;
            for _ in 0..3 {
                c.run(body)?;
            }
            Ok((c.traffic(), c.stats()))
        })
    });
    for (rank, (kinds, stats)) in seen.iter().enumerate() {
        let of = |k: &str| kinds.iter().find(|t| t.kind == k);
        for k in ["Clock", "SlabRows", "RunEnd", "RunReady"] {
            let t = of(k).unwrap_or_else(|| panic!("process {rank}: no {k} in {kinds:?}"));
            assert!(t.messages_sent > 0 && t.bytes_received > 0, "{t:?}");
        }
        // Messages are counted when sent (queued), the totals when written to the socket
        // (heartbeats included): both are non-zero, neither bounds the other at a moment.
        let sent: u64 = kinds.iter().map(|t| t.bytes_sent).sum();
        assert!(
            sent > 0 && stats.bytes_sent > 0,
            "{sent}, {}",
            stats.bytes_sent
        );
        // Its own shard wrote its refreshes into its arena; the other's sent theirs.
        let refreshes = stats.whole_chunk_refreshes + stats.partial_chunk_refreshes;
        assert!(
            stats.local_chunk_refreshes > 0 && stats.local_chunk_refreshes < refreshes,
            "process {rank}: {stats:?}"
        );
    }
}

/// A process's snapshot of a table, its rows' home processes and its bytes sent.
type Kept = (Vec<(u64, Vec<i64>)>, Vec<usize>, u64);

/// Sums of 4 updates to 50 rows of a table, and each row's home process, on 3 processes of
/// 1 worker; `on`: the table is kept on process 2's shard.
fn kept_on(mode: iterstore::Mode, on: bool) -> Vec<Kept> {
    within(60, move || {
        Cluster::run_local_processes(Config::new(1).with_mode(mode), 3, |c| {
            let t = if on {
                c.create_table_on::<i64>("t", 1, 2..3)?
            } else {
                c.create_table::<i64>("t", 1)?
            };
            let step = |w: &mut iterstore::Worker<'_>| {
                for r in 0..50u64 {
                    w.update(&t, r, &[w.id() as i64 + 1])?;
                    let mut v = [0i64];
                    w.read(&t, r, &mut v)?;
                }
                w.clock()
            };
            if c.config().mode == iterstore::Mode::Virtual {
                c.virtual_iteration(step)?;
            }
            for _ in 0..4 {
                c.run(step)?;
            }
            let homes = (0..50)
                .map(|r| c.home_of(&t, r))
                .collect::<iterstore::Result<_>>()?;
            Ok((c.snapshot(&t)?, homes, c.stats().bytes_sent))
        })
        .unwrap()
    })
}

#[test]
fn a_table_kept_on_some_shards_lives_there_and_gives_the_same_answers() {
    for mode in [iterstore::Mode::Generic, iterstore::Mode::Virtual] {
        let free = kept_on(mode, false);
        let kept = kept_on(mode, true);
        for (rank, ((rows, homes, _), (free_rows, free_homes, _))) in
            kept.iter().zip(&free).enumerate()
        {
            assert_eq!(rows, free_rows, "{mode:?}: process {rank}'s snapshot");
            assert!(homes.iter().all(|&h| h == 2), "{mode:?}: {homes:?}");
            assert!(
                free_homes.iter().any(|&h| h != 2),
                "{mode:?}: spread when free"
            );
        }
        assert_eq!(kept[0].0[0].1, vec![4 * (1 + 2 + 3)]);
    }
    // A range outside the cluster, or one the processes disagree on, is refused.
    let e = within(30, || {
        Cluster::run_local_processes(Config::new(1), 2, |c| {
            c.create_table_on::<i64>("t", 1, 1..3).map(|_| ())
        })
        .unwrap_err()
    });
    assert!(e.to_string().contains("the cluster has shards 0..2"), "{e}");
    let e = within(30, || {
        Cluster::run_local_processes(Config::new(1), 2, |c| {
            let r = c.rank();
            c.create_table_on::<i64>("t", 1, r..r + 1).map(|_| ())
        })
        .unwrap_err()
    });
    assert!(e.to_string().contains("put it on shards"), "{e}");
}

#[test]
fn a_send_queue_too_small_to_work_is_refused_before_start() {
    let mut m = Membership::new(0, free_addrs(2), secret());
    m.send_queue_bytes = iterstore::deploy::MIN_SEND_QUEUE_BYTES - 1;
    let err = Cluster::start(Config::new(1).with_membership(m.clone())).unwrap_err();
    assert!(err.to_string().contains("send_queue_bytes"), "{err}");
    m.send_queue_bytes = iterstore::deploy::MIN_SEND_QUEUE_BYTES;
    m.validate().unwrap();
}
