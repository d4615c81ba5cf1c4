/* variants.c -- the kernel-variant registry (include/gpucmp_variants.h).
 *
 * What it holds: the point table built from GC_VARIANT_POINTS, one forced value per
 * point (process-wide atomics, read by the dispatch code on every call), one `last`
 * value per point and thread (_Thread_local: a thread's report is never overwritten by
 * another's call, and concurrent calls need no locking), the probes the backends
 * registered, and the environment parser (GPUCMP_FORCE and the deprecated aliases).
 *
 * The environment is read once: gc_variants_load_env, or the first call into this file
 * that reads a forced value. A small state machine (0 unread, 1 reading, 2 read) makes
 * concurrent first calls wait for the reader instead of reading twice.
 */
#include "gpucmp_variants.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the table */
#define NAME_(P, suffix, name, flags) name,
#define FLAG_(P, suffix, name, flags) flags,
#define CHOICE_TABLES_(id, name, be, list, help) \
    static const char *const names_##id[] = {list(NAME_, _)}; \
    static const unsigned char flags_##id[] = {list(FLAG_, _)};
#define KNOB_TABLES_(id, name, be, lo, hi, help)
GC_VARIANT_POINTS(CHOICE_TABLES_, KNOB_TABLES_)

#define CHOICE_ROW_(id, name, be, list, help) \
    {name, be, help, GC_VARIANT_CHOICE, (int)(sizeof names_##id / sizeof names_##id[0]), names_##id, flags_##id, 0, 0},
#define KNOB_ROW_(id, name, be, lo, hi, help) {name, be, help, GC_VARIANT_KNOB, 0, NULL, NULL, lo, hi},
static const gc_variant_point points[GC_VP_COUNT] = {GC_VARIANT_POINTS(CHOICE_ROW_, KNOB_ROW_)};

static atomic_int forced[GC_VP_COUNT];
static _Thread_local int last[GC_VP_COUNT];

/* ------------------------------------------------------------------ backends */
#define MAX_BACKENDS 4
typedef struct {
    const char *name;
    gc_variant_probe probe;
    int probe_at_env;
} backend_entry;
static backend_entry backends[MAX_BACKENDS];
static atomic_int n_backends;

static const backend_entry *backend_of(int point)
{
    const int n = atomic_load(&n_backends);
    for (int i = 0; i < n; i++)
        if (strcmp(backends[i].name, points[point].backend) == 0) return &backends[i];
    return NULL;
}

void gc_variant_register_backend(const char *backend, gc_variant_probe probe, int probe_at_env)
{
    const int n = atomic_load(&n_backends);
    for (int i = 0; i < n; i++)
        if (strcmp(backends[i].name, backend) == 0) {
            backends[i].probe = probe;
            backends[i].probe_at_env = probe_at_env;
            return;
        }
    if (n >= MAX_BACKENDS) return;
    backends[n].name = backend;
    backends[n].probe = probe;
    backends[n].probe_at_env = probe_at_env;
    atomic_store(&n_backends, n + 1);
}

/* ------------------------------------------------------------------ listing */
const gc_variant_point *gc_variant_point_at(int point)
{
    return point >= 0 && point < GC_VP_COUNT ? &points[point] : NULL;
}

int gc_variant_lookup(const char *name)
{
    if (!name) return -1;
    for (int i = 0; i < GC_VP_COUNT; i++)
        if (strcmp(points[i].name, name) == 0) return i;
    return -1;
}

int gc_variant_present(int point) { return gc_variant_point_at(point) && backend_of(point) != NULL; }

static int in_range(const gc_variant_point *p, int value)
{
    if (p->kind == GC_VARIANT_KNOB) return value == 0 || (value >= p->lo && value <= p->hi);
    return value >= 0 && value < p->n_names;
}

int gc_variant_available(int point, int value, const char **why)
{
    const char *dummy;
    if (!why) why = &dummy;
    *why = NULL;
    const gc_variant_point *p = gc_variant_point_at(point);
    if (!p || !in_range(p, value)) {
        *why = "no such variant";
        return 0;
    }
    const backend_entry *b = backend_of(point);
    if (!b) {
        *why = "its backend is not in this build";
        return 0;
    }
    if (value == 0) return 1;
    if (p->kind == GC_VARIANT_CHOICE && (p->flags[value] & GC_VARIANT_REPORT_ONLY)) {
        *why = "it is reported, not forced";
        return 0;
    }
    if (p->kind == GC_VARIANT_KNOB || !b->probe) return 1;
    const int ok = b->probe(point, value, why);
    if (!ok && !*why) *why = "the backend says so";
    return ok;
}

/* ------------------------------------------------------------------ names and values */

/* comma-separated forceable (or, with only_available, available) names of a choice */
static void list_names(int point, int only_available, char *buf, size_t n)
{
    const gc_variant_point *p = &points[point];
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n_names && len + 2 < n; i++) {
        if (p->flags[i] & GC_VARIANT_REPORT_ONLY) continue;
        if (only_available && !gc_variant_available(point, i, NULL)) continue;
        len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", p->names[i]);
    }
}

static void list_points(char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < GC_VP_COUNT && len + 2 < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", points[i].name);
}

/* value of name at point: 0 and the value, or -1 (not a name / number of it) */
static int parse_value(int point, const char *name, int *out)
{
    const gc_variant_point *p = &points[point];
    if (strcmp(name, "auto") == 0) {
        *out = 0;
        return 0;
    }
    if (p->kind == GC_VARIANT_CHOICE) {
        for (int i = 0; i < p->n_names; i++)
            if (strcmp(name, p->names[i]) == 0) {
                *out = i;
                return 0;
            }
        return -1;
    }
    char *end = NULL;
    const long v = strtol(name, &end, 10);
    if (!*name || !end || *end || (v != 0 && (v < p->lo || v > p->hi))) return -1;
    *out = (int)v;
    return 0;
}

static const char *value_name(int point, int value, const char *zero, char *buf, size_t n)
{
    const gc_variant_point *p = &points[point];
    if (value == 0) snprintf(buf, n, "%s", zero);
    else if (p->kind == GC_VARIANT_KNOB) snprintf(buf, n, "%d", value);
    else snprintf(buf, n, "%s", in_range(p, value) ? p->names[value] : "?");
    return buf;
}

/* ------------------------------------------------------------------ forcing */
static atomic_int env_state; /* 0 unread, 1 being read, 2 read */
static void ensure_env(void);

/* the checks of gc_variant_force_value without reading the environment first */
static gc_status force_checked(int point, int value, int check_available)
{
    const gc_variant_point *p = gc_variant_point_at(point);
    if (!p) return gc_fail(GC_ERR_INVALID_ARG, "variants: no point number %d", point);
    char valid[512];
    if (!in_range(p, value)) {
        if (p->kind == GC_VARIANT_KNOB)
            return gc_fail(GC_ERR_INVALID_ARG, "%s: %d is not auto or an integer in [%d, %d]", p->name, value,
                           p->lo, p->hi);
        list_names(point, 0, valid, sizeof valid);
        return gc_fail(GC_ERR_INVALID_ARG, "%s: no variant number %d (valid: %s)", p->name, value, valid);
    }
    if (p->kind == GC_VARIANT_CHOICE && (p->flags[value] & GC_VARIANT_REPORT_ONLY)) {
        list_names(point, 0, valid, sizeof valid);
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' is reported by last, it cannot be forced (valid: %s)",
                       p->name, p->names[value], valid);
    }
    if (!backend_of(point))
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: this build has no %s backend", p->name, p->backend);
    const char *why = NULL;
    if (check_available && !gc_variant_available(point, value, &why)) {
        char name[32];
        if (p->kind == GC_VARIANT_CHOICE) list_names(point, 1, valid, sizeof valid);
        else snprintf(valid, sizeof valid, "auto, %d..%d", p->lo, p->hi);
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: '%s' is not available here: %s (available: %s)", p->name,
                       value_name(point, value, "auto", name, sizeof name), why ? why : "?", valid);
    }
    atomic_store(&forced[point], value);
    return GC_OK;
}

gc_status gc_variant_force_value(int point, int value)
{
    ensure_env();
    return force_checked(point, value, 1);
}

/* the value of `name` at `point`, or a status naming the point and the valid names */
static gc_status parse_checked(int point, const char *name, int *value)
{
    const gc_variant_point *p = &points[point];
    if (!name) return gc_fail(GC_ERR_INVALID_ARG, "%s: no variant name", p->name);
    if (parse_value(point, name, value) == 0) return GC_OK;
    if (p->kind == GC_VARIANT_KNOB)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' is not auto or an integer in [%d, %d]", p->name, name,
                       p->lo, p->hi);
    char valid[512];
    list_names(point, 0, valid, sizeof valid);
    return gc_fail(GC_ERR_INVALID_ARG, "%s: unknown variant '%s' (valid: %s)", p->name, name, valid);
}

static gc_status lookup_checked(const char *point, int *index)
{
    *index = gc_variant_lookup(point);
    if (*index >= 0) return GC_OK;
    char known[1024];
    list_points(known, sizeof known);
    return gc_fail(GC_ERR_INVALID_ARG, "variants: unknown point '%s' (points: %s)", point ? point : "(null)",
                   known);
}

gc_status gc_variant_force(const char *point, const char *value)
{
    ensure_env();
    int i, v;
    gc_status st = lookup_checked(point, &i);
    if (st) return st;
    if ((st = parse_checked(i, value, &v))) return st;
    return force_checked(i, v, 1);
}

gc_status gc_variant_reset(const char *point)
{
    ensure_env();
    if (!point) {
        for (int i = 0; i < GC_VP_COUNT; i++) {
            atomic_store(&forced[i], 0);
            last[i] = 0;
        }
        return GC_OK;
    }
    int i;
    gc_status st = lookup_checked(point, &i);
    if (st) return st;
    atomic_store(&forced[i], 0);
    last[i] = 0;
    return GC_OK;
}

const char *gc_variant_forced_name(int point, char *buf, size_t n)
{
    if (!gc_variant_point_at(point)) return "?";
    ensure_env();
    return value_name(point, atomic_load(&forced[point]), "auto", buf, n);
}

const char *gc_variant_last_name(int point, char *buf, size_t n)
{
    if (!gc_variant_point_at(point)) return "?";
    return value_name(point, last[point], "none", buf, n);
}

int gc_variant_forced(gc_vp point)
{
    ensure_env();
    return atomic_load_explicit(&forced[point], memory_order_relaxed);
}

void gc_variant_ran(gc_vp point, int value) { last[point] = value; }

int gc_variant_last(gc_vp point) { return last[point]; }

/* ------------------------------------------------------------------ the environment */
static char env_report[1024];

static void report(const char *fmt, const char *a, const char *b)
{
    const size_t len = strlen(env_report);
    if (len + 2 >= sizeof env_report) return;
    snprintf(env_report + len, sizeof env_report - len, fmt, a, b);
}

/* Applies point=value from the environment; an alias is `quiet`: a bad or unavailable
 * value is ignored without a report (the old variables ignored them). */
static void apply(const char *point, const char *value, int quiet, const char *source)
{
    const int i = gc_variant_lookup(point);
    int v = 0;
    if (i < 0) {
        if (!quiet) report("GPUCMP_FORCE: unknown point '%s'%s\n", point, "");
        return;
    }
    if (parse_value(i, value, &v) != 0) {
        if (!quiet) report("GPUCMP_FORCE: %s: unknown value '%s'\n", point, value);
        return;
    }
    const backend_entry *b = backend_of(i);
    if (!b) {
        if (!quiet) report("GPUCMP_FORCE: %s: its backend is not in this build (%s ignored)\n", point, value);
        return;
    }
    const int probe = b->probe_at_env;
    if (force_checked(i, v, probe) != GC_OK) {
        if (!quiet) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", gc_last_error());
            report("%s: %s\n", source, msg);
        }
        gc_clear_error();
    }
}

static int is_one_of(const char *v, const char *a, const char *b, const char *c)
{
    return !strcmp(v, a) || !strcmp(v, b) || !strcmp(v, c);
}

static void load_aliases(void)
{
    const char *e = getenv("GPUCMP_CPU_SIMD");
    if (e && *e) apply("cpu.gemm.simd", e, 1, "GPUCMP_CPU_SIMD");
    e = getenv("GPUCMP_CONV_GEMM");
    if (e && *e) {
        const char *v = is_one_of(e, "gemm", "1", "on") ? "gemm" : is_one_of(e, "conv", "0", "off") ? "conv" : NULL;
        if (v) {
            apply("cuda.conv2d.fwd", v, 1, "GPUCMP_CONV_GEMM");
            apply("cuda.conv2d.bwd_data", v, 1, "GPUCMP_CONV_GEMM");
            apply("cuda.conv2d.wgrad", v, 1, "GPUCMP_CONV_GEMM");
        }
    }
    e = getenv("GPUCMP_CONV_WGRAD");
    if (e && *e) {
        const char *v = is_one_of(e, "wgmma", "1", "on") ? "wgmma" : is_one_of(e, "mma", "0", "off") ? "mma" : NULL;
        if (v) apply("cuda.conv2d.wgrad", v, 1, "GPUCMP_CONV_WGRAD");
    }
    e = getenv("GPUCMP_CONV_WGRAD_VARIANT");
    if (e && *e) apply("cuda.conv2d.wgrad_wgmma", e, 1, "GPUCMP_CONV_WGRAD_VARIANT");
}

/* GPUCMP_FORCE: entries separated by commas (or semicolons), each point=value; spaces
 * around either are ignored */
static void load_force(void)
{
    const char *e = getenv("GPUCMP_FORCE");
    if (!e) return;
    char entry[256];
    while (*e) {
        size_t n = strcspn(e, ",;");
        const char *next = e[n] ? e + n + 1 : e + n;
        if (n >= sizeof entry) {
            report("GPUCMP_FORCE: entry too long: '%.40s...'%s\n", e, "");
            e = next;
            continue;
        }
        memcpy(entry, e, n);
        entry[n] = '\0';
        e = next;
        char *s = entry, *end = entry + n;
        while (*s && isspace((unsigned char)*s)) s++;
        while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            report("GPUCMP_FORCE: '%s' is not point=value%s\n", s, "");
            continue;
        }
        char *pe = eq;
        *eq = '\0';
        while (pe > s && isspace((unsigned char)pe[-1])) *--pe = '\0';
        char *v = eq + 1;
        while (*v && isspace((unsigned char)*v)) v++;
        apply(s, v, 0, "GPUCMP_FORCE");
    }
}

void gc_variants_load_env(void)
{
    static _Thread_local int reading; /* this thread is the reader: a nested call returns */
    if (reading) return;
    int expect = 0;
    if (atomic_compare_exchange_strong(&env_state, &expect, 1)) {
        reading = 1;
        /* the error text of the caller survives the parse */
        char saved[512];
        snprintf(saved, sizeof saved, "%s", gc_last_error());
        load_aliases();
        load_force();
        if (saved[0]) (void)gc_fail(GC_ERR_INVALID_ARG, "%s", saved);
        else gc_clear_error();
        atomic_store(&env_state, 2);
        reading = 0;
        return;
    }
    while (atomic_load(&env_state) != 2) {
        /* another thread is reading it (microseconds) */
    }
}

static void ensure_env(void)
{
    if (atomic_load_explicit(&env_state, memory_order_acquire) != 2) gc_variants_load_env();
}

const char *gc_variants_env_report(void)
{
    ensure_env();
    return env_report;
}
