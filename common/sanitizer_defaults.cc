// The sanitizer settings every coil program carries when built with -DCOIL_SANITIZE=ON, so
// that a test, a benchmark or coil-serve under mpirun behaves the same however it is started
// (ctest, a shell, Open MPI's launcher) without ASAN_OPTIONS or a suppressions file to pass
// along. Settings in the environment still win: ASAN_OPTIONS, UBSAN_OPTIONS, LSAN_OPTIONS.
//
// The leak suppressions name only libraries coil does not own. Open MPI (and the libevent it
// carries) keeps process-lifetime allocations that it never frees: its component registries,
// argv copies, the op tables built by MPI_Init. They show up as leaks at exit in every
// program that initializes MPI, and nothing coil does can free them. Suppressing them by
// library, not by function, keeps a leak in coil's own code visible even when Open MPI is in
// its stack: LeakSanitizer suppresses a report when any frame matches, so the entries must
// not name coil's code, and Open MPI's frames only appear with the slow unwinder (the
// libraries are built without frame pointers), hence fast_unwind_on_malloc=0.
//
// Linked into every executable by cmake/CoilTargets.cmake; not built otherwise.

extern "C" {

// NOLINTBEGIN(readability-identifier-naming): the names the sanitizer runtimes look up.
__attribute__((visibility("default"), used)) const char* __asan_default_options() {
  return "fast_unwind_on_malloc=0:detect_leaks=1:abort_on_error=0:strict_string_checks=1:"
         "detect_stack_use_after_return=0:check_initialization_order=1";
}

__attribute__((visibility("default"), used)) const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}

__attribute__((visibility("default"), used)) const char* __lsan_default_suppressions() {
  return "leak:libmpi.so\n"
         "leak:libopen-pal.so\n"
         "leak:libopen-rte.so\n"
         "leak:libevent\n"
         "leak:mca_\n"
         "leak:libcublasLt.so\n";
}
// NOLINTEND(readability-identifier-naming)

}  // extern "C"
