#ifndef LB_LOG_H
#define LB_LOG_H
#include "loglevel.h"

struct lb_diags; /* limitsfile.h */

/* Current level; LB_LOG_DEFAULT until the configuration is resolved. */
extern int lb_log_level;

void lb_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print the diagnostics the loader collected, filtered by the (now known) level. */
void lb_log_diags(const struct lb_diags *dg);

#define LB_ERROR(...) lb_log(LB_LOG_ERROR, __VA_ARGS__)
#define LB_WARN(...) lb_log(LB_LOG_WARN, __VA_ARGS__)
#define LB_INFO(...) do { if (lb_log_level >= LB_LOG_INFO) lb_log(LB_LOG_INFO, __VA_ARGS__); } while (0)
#define LB_DEBUG(...) do { if (lb_log_level >= LB_LOG_DEBUG) lb_log(LB_LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
