/* bench/floor.c: the floor of an extraction, the least a plain program does to lay a tree down.
 *
 * It replays a tree's names and sizes from a manifest (what `find TREE -mindepth 1 -printf
 * '%y\0%m\0%s\0%P\0%l\0'` prints: type, mode, size, path, link text, each ended by a NUL) into
 * the folder DEST: mkdirat for a folder, openat(O_CREAT|O_EXCL) + write + close for a file,
 * symlinkat for a symlink, in the manifest's order, on one thread, the data from memory (no
 * archive, no decompression, no checksum), then one syncfs so that the tree is on the disk as an
 * extraction that syncs leaves it. Nothing else: no times, owners or modes after the fact (a
 * folder's and a file's mode are given when made), no hard links (each name of a linked file is
 * written as a file of its own), no extended attributes. bench/extract.sh runs it as the tool
 * `floor`, cold like the others, so that every extraction figure stands beside its floor.
 *
 *   cc -O2 -o floor bench/floor.c && ./floor MANIFEST DEST
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The bytes every file is written from: pseudo-random, so that no filesystem could shortcut them. */
#define CHUNK (1 << 20)
static unsigned char data[CHUNK];

static void die(const char *what, const char *path) {
    fprintf(stderr, "floor: %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

/* The next NUL-ended field at *p (within end), or NULL at the end of the manifest. */
static char *field(char **p, char *end) {
    if (*p >= end)
        return NULL;
    char *f = *p;
    char *z = memchr(f, 0, (size_t)(end - f));
    if (!z) {
        fprintf(stderr, "floor: the manifest ends inside a record\n");
        exit(2);
    }
    *p = z + 1;
    return f;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: floor MANIFEST DEST\n");
        return 2;
    }
    unsigned long long x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < CHUNK; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data[i] = (unsigned char)x;
    }
    int m = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (m < 0)
        die("open", argv[1]);
    struct stat st;
    if (fstat(m, &st) != 0)
        die("fstat", argv[1]);
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        die("malloc", argv[1]);
    size_t have = 0;
    while (have < (size_t)st.st_size) {
        ssize_t n = read(m, buf + have, (size_t)st.st_size - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            die("read", argv[1]);
        have += (size_t)n;
    }
    close(m);
    int dir = open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        die("open", argv[2]);
    char *p = buf, *end = buf + have;
    unsigned long files = 0, dirs = 0, links = 0;
    unsigned long long bytes = 0;
    for (;;) {
        char *type = field(&p, end);
        if (!type)
            break;
        char *mode_s = field(&p, end), *size_s = field(&p, end), *path = field(&p, end), *target = field(&p, end);
        if (!target) {
            fprintf(stderr, "floor: the manifest ends inside a record\n");
            return 2;
        }
        mode_t mode = (mode_t)strtoul(mode_s, NULL, 8);
        unsigned long long size = strtoull(size_s, NULL, 10);
        switch (type[0]) {
        case 'd':
            if (mkdirat(dir, path, mode) != 0 && errno != EEXIST)
                die("mkdirat", path);
            dirs++;
            break;
        case 'f': {
            int fd = openat(dir, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
            if (fd < 0)
                die("openat", path);
            unsigned long long left = size;
            while (left > 0) {
                size_t n = left < CHUNK ? (size_t)left : CHUNK;
                ssize_t w = write(fd, data, n);
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    die("write", path);
                left -= (unsigned long long)w;
            }
            if (close(fd) != 0)
                die("close", path);
            files++;
            bytes += size;
            break;
        }
        case 'l':
            if (symlinkat(target, dir, path) != 0)
                die("symlinkat", path);
            links++;
            break;
        default:
            /* FIFOs, devices, sockets: not part of the floor. */
            break;
        }
    }
    if (syncfs(dir) != 0)
        die("syncfs", argv[2]);
    fprintf(stderr, "floor: %lu files (%llu bytes), %lu folders, %lu symlinks, one syncfs\n", files, bytes, dirs, links);
    return 0;
}
