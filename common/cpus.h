// How many threads a rank should compute with. mpirun binds each rank to one core by
// default when there are at most two ranks; threads beyond the cores a process may run on
// only take turns on them, which slows decode many times over (the figure:
// docs/deployment.md), so the default follows the process's CPU affinity and an explicit
// larger value is warned about.
#ifndef COIL_COMMON_CPUS_H_
#define COIL_COMMON_CPUS_H_

namespace coil {

// CPUs in this process's affinity mask (at least 1).
int AllowedCpus();

// `requested` threads if > 0 (warning when it exceeds AllowedCpus()), else the allowed
// CPUs divided among `ranks_sharing` ranks of this machine (at least 1).
int ChooseThreads(int requested, int ranks_sharing);

}  // namespace coil

#endif  // COIL_COMMON_CPUS_H_
