/* The log levels: LIBCUDA_LOG_LEVEL's values (the limits file's, limitsfile.h) and what log.h
 * filters by. Their own header, so that a file that only logs needs nothing of the limits file. */
#ifndef LB_LOGLEVEL_H
#define LB_LOGLEVEL_H

enum lb_level { LB_LOG_SILENT = 0, LB_LOG_ERROR = 1, LB_LOG_WARN = 2, LB_LOG_INFO = 3, LB_LOG_DEBUG = 4 };
#define LB_LOG_DEFAULT LB_LOG_WARN

#endif
