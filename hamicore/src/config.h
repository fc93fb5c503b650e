#ifndef LB_CONFIG_H
#define LB_CONFIG_H
#include "limitsfile.h"

/* The limits file, compiled in: never taken from the environment, because a login session is
 * exactly the process that has lost its environment. Tests build with another path only for the
 * unit-test binary (the library always uses this one). */
#define LB_OVERRIDE_FILE "/overrideEnv"
/* Bytes of the limits file that are read at most; the rest is ignored with an ERROR. */
#define LB_FILE_MAX (4u << 20)
#define LB_READ_CHUNK 65536u

/* Read `path` through the streaming reader into fv (open/read into a static buffer).
 * Returns 1 if the file was read (even partly), 0 if it is absent (ENOENT, ENOTDIR: environment
 * mode), -1 if it is there but cannot be read (an ERROR diagnostic names the cause).
 * Not thread-safe (static buffer): called from the one-time initialization only. */
int lb_read_limits_file(const char *path, struct lb_file_vars *fv, struct lb_diags *dg, int legacy);

/* The process configuration, resolved once at initialization. */
extern struct lb_config lb_cfg;
extern struct lb_diags lb_init_diags;
void lb_config_load(void);

#endif
