/* The readings the fallback controller closes its loop on (sensors.c): NVML through the real
 * symbols, and the clocks. The controller reads them only through a struct lb_sensors, so its
 * unit tests script them (test/unit_controller.c). */
#ifndef LB_SENSORS_H
#define LB_SENSORS_H

#include <stdint.h>

struct lb_sensors {
    /* The container's utilisation of device d in percent over the last second; -1 if unknown
     * (may_hold: in the first seconds of an episode, no sample of ours may be no reading). */
    int (*container_util)(int d, uint64_t launched_in_window, int may_hold);
    int (*device_util)(int d);   /* the whole device, percent; -1 unknown */
    unsigned (*sm_clock)(int d); /* MHz, 0 unknown */
    int (*shared_now)(int d);    /* 1 if another container has a context on d (or NVML cannot say) */
    int64_t (*now_ns)(void);     /* CLOCK_MONOTONIC */
    int64_t (*realtime_s)(void); /* CLOCK_REALTIME seconds (the region's calib_at) */
    int (*switched_off)(void);   /* `default` with the monitor's switch off: not limited now */
};

extern const struct lb_sensors lb_nvml_sensors;

#endif
