// How long idle OpenMP threads spin before they sleep, for the service
// processes. libgomp's default (GOMP_SPINCOUNT 300000, about a millisecond)
// keeps every compute thread of a worker spinning while the step waits in
// an all-to-all on its peers, and with router and workers on the same cores
// that spinning takes the cores the peers need (bench: a 2-worker decode
// step on 2 cores, worker CPU per request 40-44 ms with the default, 30-35
// ms with 10000). libgomp reads its environment once, when it is loaded,
// so the variable must be set before the process starts.
#pragma once

namespace moe {

// When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set: sets
// GOMP_SPINCOUNT=10000 (a few tens of microseconds) and re-executes this
// binary with the same arguments (same pid), so that libgomp sees it. Does
// nothing when either is set (the operator's choice) or when re-executing
// fails. Call first thing in main, before any thread starts.
void ShortenOpenMpSpinning(char** argv);

}  // namespace moe
