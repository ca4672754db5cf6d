#include <mosquitto.h>
#include <mqtt_protocol.h>
static inline int cmosq_int_option(struct mosquitto *m, enum mosq_opt_t o, int v) { return mosquitto_int_option(m, o, v); }

/* The CONNECT properties every later mosquitto_connect_async sends (MQTT 5 only): the Maximum
   Packet Size the broker must honour and the Session Expiry Interval (0xFFFFFFFF: the session is
   kept, as clean session off does in 3.1.1). libmosquitto 2.0 takes CONNECT properties only in
   its blocking mosquitto_connect_bind_v5, which stores them before it checks its address: given
   port -1 it stores them and returns MOSQ_ERR_INVAL without connecting, and the non-blocking
   connects then send them (docs/architecture.md, "The MQTT inbound gate"). With max_packet 0
   the stored properties are cleared (a 3.1.1 connect must not have any). */
static inline int cmosq_set_connect_properties(struct mosquitto *m, uint32_t max_packet, uint32_t session_expiry, int keepalive) {
    mosquitto_property *props = NULL;
    int rc = MOSQ_ERR_SUCCESS;
    if (max_packet) {
        rc = mosquitto_property_add_int32(&props, MQTT_PROP_MAXIMUM_PACKET_SIZE, max_packet);
        if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_property_add_int32(&props, MQTT_PROP_SESSION_EXPIRY_INTERVAL, session_expiry);
        if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_property_check_all(CMD_CONNECT, props);
    }
    if (rc == MOSQ_ERR_SUCCESS) {
        rc = mosquitto_connect_bind_v5(m, "", -1, keepalive, NULL, props);
        if (rc == MOSQ_ERR_INVAL) rc = MOSQ_ERR_SUCCESS; /* the address, refused after the properties were stored */
    }
    mosquitto_property_free_all(&props);
    return rc;
}

/* The Server Keep Alive a CONNACK's properties carry, or -1. */
static inline int cmosq_server_keepalive(const mosquitto_property *props) {
    uint16_t v = 0;
    return mosquitto_property_read_int16(props, MQTT_PROP_SERVER_KEEP_ALIVE, &v, false) ? (int)v : -1;
}
