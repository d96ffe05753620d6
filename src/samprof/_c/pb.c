/* pb: protocol-buffer wire encoding (varints and length-delimited fields).
 *
 * Nested messages reserve a fixed 5-byte varint for their length, written
 * in pb_end with continuation bits: a padded varint is valid protobuf and
 * spares a second pass. */
#include "pb.h"

#include <stdlib.h>
#include <string.h>

#include "grow.h"

#define PB_WIRE_VARINT 0
#define PB_WIRE_BYTES 2
#define PB_LEN_RESERVE 5 /* enough for lengths below 2^35 */

void
pb_init(pb_buf_t *b)
{
    memset(b, 0, sizeof(*b));
}

void
pb_free(pb_buf_t *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

int
pb_ok(const pb_buf_t *b)
{
    return !b->failed;
}

static int
pb_reserve(pb_buf_t *b, size_t n)
{
    if (b->failed) {
        return -1;
    }
    if (GROW(b->data, b->cap, b->len + n) < 0) {
        b->failed = 1;
        return -1;
    }
    return 0;
}

void
pb_varint(pb_buf_t *b, uint64_t v)
{
    if (pb_reserve(b, 10) < 0) {
        return;
    }
    while (v >= 0x80) {
        b->data[b->len++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b->data[b->len++] = (uint8_t)v;
}

static void
pb_tag(pb_buf_t *b, uint32_t field, int wire)
{
    pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire);
}

void
pb_uint64(pb_buf_t *b, uint32_t field, uint64_t v)
{
    pb_tag(b, field, PB_WIRE_VARINT);
    pb_varint(b, v);
}

void
pb_uint64_opt(pb_buf_t *b, uint32_t field, uint64_t v)
{
    if (v != 0) {
        pb_uint64(b, field, v);
    }
}

void
pb_int64(pb_buf_t *b, uint32_t field, int64_t v)
{
    pb_uint64(b, field, (uint64_t)v);
}

void
pb_int64_opt(pb_buf_t *b, uint32_t field, int64_t v)
{
    if (v != 0) {
        pb_int64(b, field, v);
    }
}

void
pb_bool(pb_buf_t *b, uint32_t field, int v)
{
    pb_uint64(b, field, v ? 1 : 0);
}

void
pb_bytes(pb_buf_t *b, uint32_t field, const void *p, size_t n)
{
    pb_tag(b, field, PB_WIRE_BYTES);
    pb_varint(b, n);
    if (pb_reserve(b, n) < 0) {
        return;
    }
    if (n > 0) {
        memcpy(b->data + b->len, p, n);
    }
    b->len += n;
}

size_t
pb_begin(pb_buf_t *b, uint32_t field)
{
    pb_tag(b, field, PB_WIRE_BYTES);
    if (pb_reserve(b, PB_LEN_RESERVE) < 0) {
        return 0;
    }
    size_t mark = b->len;
    b->len += PB_LEN_RESERVE;
    return mark;
}

void
pb_end(pb_buf_t *b, size_t mark)
{
    if (b->failed) {
        return;
    }
    uint64_t n = b->len - mark - PB_LEN_RESERVE;
    for (int i = 0; i < PB_LEN_RESERVE; i++) {
        uint8_t byte = (uint8_t)(n & 0x7f);
        n >>= 7;
        if (i < PB_LEN_RESERVE - 1) {
            byte |= 0x80;
        }
        b->data[mark + (size_t)i] = byte;
    }
}

void
pb_uint64s(pb_buf_t *b, uint32_t field, const uint64_t *v, size_t n)
{
    if (n == 0) {
        return;
    }
    size_t mark = pb_begin(b, field);
    for (size_t i = 0; i < n; i++) {
        pb_varint(b, v[i]);
    }
    pb_end(b, mark);
}

void
pb_int64s(pb_buf_t *b, uint32_t field, const int64_t *v, size_t n)
{
    if (n == 0) {
        return;
    }
    size_t mark = pb_begin(b, field);
    for (size_t i = 0; i < n; i++) {
        pb_varint(b, (uint64_t)v[i]);
    }
    pb_end(b, mark);
}
