#ifndef DROWSE_MQTT_GATE_H
#define DROWSE_MQTT_GATE_H
#include <stddef.h>
#include <stdint.h>

/* The inbound gate of the MQTT session: every packet libmosquitto reads from the broker is
   bounded before libmosquitto allocates for it (docs/architecture.md, "The MQTT inbound gate").

   libmosquitto (2.0) reads a packet's fixed header, then allocates the whole remaining length
   and reads it, and only then hands the message over: one 200 MB PUBLISH cost 200 MB and more.
   The gate sits between libmosquitto and its socket (plain `read`, or `SSL_read` over TLS), on
   the session's thread only, and only while the session's loop is inside a libmosquitto read
   call (`drowse_mqtt_gate_enter`/`_leave`). It reads the stream ahead into a buffer of its own,
   and for each packet:
   - remaining length within the bound: handed to libmosquitto unchanged;
   - a PUBLISH over the bound: libmosquitto gets the same PUBLISH (topic, QoS, packet id) with
     no payload, the gate drops the payload's bytes as they arrive (never more than its buffer
     in memory), and records the packet as oversized, so the session refuses and acknowledges
     it (the broker does not deliver it again, and the rest is served);
   - any other packet over the bound: the connection fails (EPROTO), nothing of it is read.
   Over MQTT 5 the broker was told the bound as the Maximum Packet Size and does not send more;
   a broker that does anyway meets the same gate (a cut PUBLISH keeps its properties). */

typedef struct drowse_mqtt_gate drowse_mqtt_gate;

/* A gate admitting packets whose remaining length is at most max_remaining. */
drowse_mqtt_gate *drowse_mqtt_gate_new(uint32_t max_remaining);
void drowse_mqtt_gate_free(drowse_mqtt_gate *g);
/* A new connection: the stream starts at a packet boundary; counters start again. */
void drowse_mqtt_gate_reset(drowse_mqtt_gate *g);
/* The connection speaks MQTT 5 (set after _reset, before its first read). */
void drowse_mqtt_gate_set_v5(drowse_mqtt_gate *g, int v5);
/* Until _leave, reads of fd (tls = 0) or SSL_reads of the session (tls = 1) on this thread go
   through g. */
void drowse_mqtt_gate_enter(drowse_mqtt_gate *g, int fd, int tls);
void drowse_mqtt_gate_leave(void);
/* Bytes the gate holds that libmosquitto may read now: the session reads again without
   waiting for its socket (which may have nothing more). */
size_t drowse_mqtt_gate_ready(const drowse_mqtt_gate *g);
/* Whether the ordinal-th PUBLISH of this connection (from 1, in the order libmosquitto
   delivers them) was oversized; if so, its payload's size in *bytes. */
int drowse_mqtt_gate_take_oversized(drowse_mqtt_gate *g, uint64_t ordinal, uint64_t *bytes);
/* Whether the ordinal-th PUBLISH had the DUP flag: the broker sent it before (a redelivery).
   Known for the last 1024 PUBLISHes. */
int drowse_mqtt_gate_dup(const drowse_mqtt_gate *g, uint64_t ordinal);
/* Whether libmosquitto's read and SSL_read are the gate's: the process's own definitions are
   the ones the dynamic linker binds (the executable exports them). 0: the gate is not in place. */
int drowse_mqtt_gate_bound(void);
/* PUBLISHes cut and other packets refused since the gate was made. */
uint64_t drowse_mqtt_gate_cut_count(const drowse_mqtt_gate *g);
uint64_t drowse_mqtt_gate_refused_count(const drowse_mqtt_gate *g);

#endif
