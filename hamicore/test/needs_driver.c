/* A test double of a core linked with -Wl,--no-as-needed: a shared object whose only content is
 * its DT_NEEDED entries on libcuda.so.1 and libnvidia-ml.so.1. A toolchain without Debian's
 * --as-needed default records them for HAMi-core (it links -lcuda -lnvidia-ml but calls the
 * driver through dlsym), so every process of the container loads both driver libraries at start,
 * and their constructors and fork handlers run in programs that never use a GPU: login, sshd,
 * cron, bash. Preloaded after the core (make matrix CORE_LINK=no-as-needed, and the launch
 * methods' test), it makes any core behave so; docs/matrix.md. */
__attribute__((visibility("default"))) const int limitbed_needs_driver = 1;
