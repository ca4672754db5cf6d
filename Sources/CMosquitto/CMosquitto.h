#include <mosquitto.h>
static inline int cmosq_int_option(struct mosquitto *m, enum mosq_opt_t o, int v) { return mosquitto_int_option(m, o, v); }
