//! The three apps on several processes inside this test process (the in-process
//! transport): what one process of as many workers computes. (Over TCP, as separate
//! processes: the CLI crate's `tests/cli/cluster.rs`.)

/// The three apps run on several processes inside this test process (the in-process
/// transport, `Cluster::run_local_processes`): 2 processes of 2 workers and 4 of 1 give
/// exactly what one process of 4 workers gives, in every mode.
#[test]
fn every_app_on_local_processes_computes_what_one_process_of_as_many_workers_computes() {
    use iterstore::Cluster;
    use iterstore_algo::lda::LdaConfig;
    use iterstore_algo::mf::MfConfig;
    use iterstore_apps::pagerank::PageRankParams;
    use iterstore_apps::{lda, mf, pagerank, AppError};
    use iterstore_data::{split_ratings, CorpusSpec, GraphSpec, RatingsSpec};

    let lift = |e: AppError| iterstore::Error::app(0, e);
    let (train, test) = split_ratings(&RatingsSpec::preset("tiny").unwrap().generate(), 0.1, 1);
    let (corpus, planted) = CorpusSpec::preset("tiny").unwrap().generate();
    let graph = GraphSpec::preset("tiny").unwrap().generate();
    let mfp = MfConfig::default();
    let ldap = LdaConfig {
        topics: planted.num_topics(),
        ..LdaConfig::default()
    };
    let prp = PageRankParams::default();
    let model_bytes = |m: &mf::MfOutcome| {
        let mut out = Vec::new();
        m.write_model(&mut out).unwrap();
        out
    };
    for mode in crate::util::MODES {
        let one = crate::util::bsp(mode, 4, 3);
        let mf_one = model_bytes(&mf::run(&one, &mfp, &train, &test.ratings).unwrap());
        let lda_one = lda::run(&one, &ldap, &corpus).unwrap().model;
        let pr_one = pagerank::run(&one, &prp, &graph).unwrap().ranks;
        for processes in [2, 4] {
            let cfg = crate::util::bsp(mode, 4 / processes, 3);
            let store = cfg.store_config();
            let got = Cluster::run_local_processes(store.clone(), processes, |c| {
                let m =
                    mf::run_in(c, &cfg, &mfp, &train, &test.ratings, &mut |_| {}).map_err(lift)?;
                Ok(model_bytes(&m))
            })
            .unwrap();
            assert!(
                got.iter().all(|m| *m == mf_one),
                "mf {mode:?} on {processes} processes"
            );
            let got = Cluster::run_local_processes(store.clone(), processes, |c| {
                lda::run_in(c, &cfg, &ldap, &corpus, &mut |_| {}).map_err(lift)
            })
            .unwrap();
            assert!(
                got.iter().all(|o| o.model == lda_one),
                "lda {mode:?} on {processes} processes"
            );
            let got = Cluster::run_local_processes(store, processes, |c| {
                pagerank::run_in(c, &cfg, &prp, &graph, &mut |_| {}).map_err(lift)
            })
            .unwrap();
            assert!(
                got.iter().all(|o| o.ranks == pr_one),
                "pagerank {mode:?} on {processes} processes"
            );
        }
    }
}
