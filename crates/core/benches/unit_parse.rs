//! Parse + hash throughput on typical unit files (issue 3 target: ≥ 100,000 units/s on one core).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fleet_core::unit::UnitFile;

/// Units shaped like the ones in the reference transcripts and the functional-test fixtures.
const TYPICAL: [&str; 4] = [
    "[Unit]\nDescription=Hello World\n\n[Service]\nExecStart=/bin/sh -c \"while true; do echo hi; sleep 1; done\"\n",
    "[Unit]\nDescription=Hello template instance %i\nAfter=docker.service\nRequires=docker.service\n\n\
     [Service]\nTimeoutStartSec=0\nExecStartPre=-/usr/bin/docker kill busybox%i\n\
     ExecStartPre=-/usr/bin/docker rm busybox%i\nExecStart=/usr/bin/docker run --name busybox%i busybox \\\n  \
     /bin/sh -c \"trap 'exit 0' INT TERM; while true; do echo Hello World; sleep 1; done\"\n\
     ExecStop=/usr/bin/docker stop busybox%i\n\n[X-Fleet]\nConflicts=hello@*.service\n",
    "# global unit\n[Unit]\nDescription=Global with metadata\n\n[Service]\nExecStart=/bin/sh -c \"sleep 1000\"\n\
     Restart=always\nRestartSec=5\n\n[X-Fleet]\nGlobal=true\nMachineMetadata=\"role=a\" \"role=c\"\n",
    "[Unit]\nDescription=Sidekick of meta-b.service\nBindsTo=meta-b.service\nAfter=meta-b.service\n\n\
     [Service]\nExecStart=/bin/sh -c \"while true; do etcdctl set /services/meta-b/%H:%i running --ttl 60; \
     sleep 45; done\"\nExecStop=/usr/bin/etcdctl rm /services/meta-b/%H:%i\n\n[X-Fleet]\nMachineOf=meta-b.service\n",
];

fn parse_and_hash(c: &mut Criterion) {
    let mut group = c.benchmark_group("unit");
    group.throughput(Throughput::Elements(TYPICAL.len() as u64));
    group.bench_function("parse+hash (4 typical units)", |b| {
        b.iter(|| {
            for text in TYPICAL {
                let unit = UnitFile::parse(black_box(text)).expect("typical units parse");
                black_box(unit.hash());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, parse_and_hash);
criterion_main!(benches);
