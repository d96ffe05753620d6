/* pb: a minimal protocol-buffer encoder into a growable byte buffer.
 *
 * One function per wire operation; nested messages are opened with
 * pb_begin and closed with pb_end, which back-patches the length. Errors
 * (out of memory) are sticky: check pb_ok once at the end. */
#ifndef SAMPROF_PB_H
#define SAMPROF_PB_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *data; /* malloc'ed bytes */
    size_t len;    /* bytes written */
    size_t cap;    /* bytes allocated */
    int failed;    /* set when an allocation failed; later writes no-op */
} pb_buf_t;

void pb_init(pb_buf_t *b);
void pb_free(pb_buf_t *b);
/* 1 when every write so far succeeded. */
int pb_ok(const pb_buf_t *b);

void pb_varint(pb_buf_t *b, uint64_t v);
/* Field writers. The _opt variants skip zero values, as proto3 does. */
void pb_uint64(pb_buf_t *b, uint32_t field, uint64_t v);
void pb_uint64_opt(pb_buf_t *b, uint32_t field, uint64_t v);
void pb_int64(pb_buf_t *b, uint32_t field, int64_t v);
void pb_int64_opt(pb_buf_t *b, uint32_t field, int64_t v);
void pb_bool(pb_buf_t *b, uint32_t field, int v);
void pb_bytes(pb_buf_t *b, uint32_t field, const void *p, size_t n);
/* Packed repeated fields. */
void pb_uint64s(pb_buf_t *b, uint32_t field, const uint64_t *v, size_t n);
void pb_int64s(pb_buf_t *b, uint32_t field, const int64_t *v, size_t n);
/* Opens a length-delimited field; returns a mark for pb_end. */
size_t pb_begin(pb_buf_t *b, uint32_t field);
void pb_end(pb_buf_t *b, size_t mark);

#endif
