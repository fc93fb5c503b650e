/* The module-globals reader (abi/include/limitbed/modglobals.h): what libvgpu.so charges a module
 * load, and fakegpu charges the loaded module. PTX, ELF cubins, fatbins, and the inputs it must
 * refuse rather than misread (-1: the load is then charged nothing and logged, docs/attacks.md). */
#include "unit.h"

#include "limitbed/modglobals.h"

static uint64_t ptx(const char *s, int *rc)
{
    uint64_t b = 12345;
    *rc = lb_module_globals(s, strlen(s), &b);
    return b;
}

static void test_ptx(void)
{
    int rc;
    CHECK_U64(ptx(".version 7.0\n.target sm_50\n.address_size 64\n"
                  ".visible .global .align 8 .b8 big[1000];\n"
                  ".global .f32 one;\n"
                  ".global .v4 .u32 vecs[2][3];\n"
                  ".extern .global .b8 elsewhere[4096];\n"
                  "// .global .b8 commented[4096];\n"
                  "/* .global .b8 also[4096]; */\n"
                  ".global .u16 init[] = {1, 2, 3};\n"
                  ".visible .entry k() { .global .b8 inner[4096]; ret; }\n",
                  &rc),
              1000 + 4 + 4 * 4 * 6 + 2 * 3);
    CHECK(rc == 0);
    CHECK_U64(ptx(".version 8.0\n.target sm_90\n.visible .entry k() { ret; }\n", &rc), 0);
    CHECK(rc == 0);
    ptx(".target sm_50\n.global .b8 a[10];\n", &rc); /* no .version: not PTX */
    CHECK(rc == -1);
    ptx(".version 7.0\n.global .b8 a[];\n", &rc); /* unsized without an initializer */
    CHECK(rc == -1);
    ptx(".version 7.0\n.global .b8 a[18446744073709551615][2];\n", &rc); /* overflows */
    CHECK(rc == -1);
    ptx(".version 7.0\n.global .u64 a[9223372036854775807][] = {1, 2, 3};\n", &rc);
    CHECK(rc == -1);
    ptx(".version 7.0\n.global .b8 a[99999999999999999999];\n", &rc);
    CHECK(rc == -1);
    /* A length that cuts the text: only what is inside it counts. */
    const char *cut = ".version 7.0\n.global .b8 a[64];\n.global .b8 b[4096];\n";
    uint64_t b = 0;
    CHECK(lb_module_globals(cut, strlen(".version 7.0\n.global .b8 a[64];\n"), &b) == 0);
    CHECK_U64(b, 64);
}

static void put(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* A 64-bit ELF with sections: null, .shstrtab, .nv.global (g bytes), .nv.global.init (i bytes),
 * .text. Returns its length. */
static size_t elf(unsigned char *e, uint64_t g, uint64_t i)
{
    static const char names[] = "\0.shstrtab\0.nv.global\0.nv.global.init\0.text";
    memset(e, 0, 1024);
    memcpy(e, "\x7f" "ELF", 4);
    e[4] = 2, e[5] = 1;
    size_t stroff = 64, shoff = 128, n = 5;
    memcpy(e + stroff, names, sizeof names);
    put(e + 0x28, shoff, 8);
    put(e + 0x3A, 64, 2);
    put(e + 0x3C, n, 2);
    put(e + 0x3E, 1, 2);
    const uint32_t name_at[] = {0, 1, 11, 22, 39};
    const uint64_t size[] = {0, sizeof names, g, i, 4096};
    for (size_t k = 0; k < n; k++) {
        unsigned char *sh = e + shoff + 64 * k;
        put(sh, name_at[k], 4);
        put(sh + 0x20, size[k], 8);
        if (k == 1)
            put(sh + 0x18, stroff, 8);
    }
    return shoff + 64 * n;
}

static void test_elf(void)
{
    unsigned char e[1024];
    size_t len = elf(e, 4096, 100);
    uint64_t b = 0;
    CHECK(lb_module_globals(e, len, &b) == 0);
    CHECK_U64(b, 4196);
    CHECK(lb_module_globals(e, 100, &b) == -1); /* the section headers lie beyond the image */
    put(e + 0x3C, 60000, 2);                     /* more sections than the image holds */
    CHECK(lb_module_globals(e, len, &b) == -1);
    elf(e, UINT64_MAX, 2); /* sizes that overflow the sum */
    CHECK(lb_module_globals(e, len, &b) == -1);
    elf(e, 1, 1);
    e[4] = 1; /* 32-bit: not what a cubin is */
    CHECK(lb_module_globals(e, len, &b) == -1);
}

/* A fatbin: header (magic, version, header size 16, payload size), then entries (kind 1 PTX,
 * 2 ELF; header size 64; payload size; flags). */
static size_t fatbin(unsigned char *f, const unsigned char *elfimg, size_t elflen, const char *ptxs, uint64_t flags)
{
    size_t off = 16, plen = strlen(ptxs) + 1;
    memset(f, 0, 4096);
    put(f, LB_MG_FATBIN_MAGIC, 4);
    put(f + 4, 1, 2);
    put(f + 6, 16, 2);
    unsigned char *en = f + off;
    put(en, 2, 2), put(en + 4, 64, 4), put(en + 8, elflen, 8), put(en + 40, flags, 8);
    memcpy(en + 64, elfimg, elflen);
    off += 64 + elflen;
    en = f + off;
    put(en, 1, 2), put(en + 4, 64, 4), put(en + 8, plen, 8);
    memcpy(en + 64, ptxs, plen);
    off += 64 + plen;
    put(f + 8, off - 16, 8);
    return off;
}

static void test_fatbin(void)
{
    unsigned char e[1024], f[4096];
    size_t elen = elf(e, 4096, 0);
    size_t len = fatbin(f, e, elen, ".version 7.0\n.global .b8 a[8192];\n", 0);
    uint64_t b = 0;
    CHECK(lb_module_globals(f, len, &b) == 0);
    CHECK_U64(b, 8192); /* the larger of its entries: the driver loads one */
    len = fatbin(f, e, elen, ".version 7.0\n.global .b8 a[8192];\n", LB_MG_FATBIN_COMPRESSED);
    CHECK(lb_module_globals(f, len, &b) == -1); /* compressed: cannot be told */
    len = fatbin(f, e, elen, ".version 7.0\n", 0);
    CHECK(lb_module_globals(f, len - 40, &b) == -1); /* cut short */
    /* The wrapper cudart registers points at the fatbin. */
    unsigned char w[16];
    const void *data = f;
    len = fatbin(f, e, elen, ".version 7.0\n", 0);
    put(w, LB_MG_FATBIN_WRAPPER, 4), put(w + 4, 1, 4);
    memcpy(w + 8, &data, sizeof data);
    CHECK(lb_module_globals(w, 0, &b) == 0);
    CHECK_U64(b, 4096);
}

const struct unit_test unit_modglobals_tests[] = {
    {"modglobals/PTX: module-scope .global variables, sized", test_ptx},
    {"modglobals/ELF cubin: the .nv.global sections, bounded", test_elf},
    {"modglobals/fatbin: the largest entry, compressed refused", test_fatbin},
    {NULL, NULL},
};
