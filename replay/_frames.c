/* replay._frames: a batch of a local shard's TFRecord frames read and checked outside the GIL.
 *
 * Why hand-written: no library reads many byte ranges of a file and checks their TFRecord
 * CRC-32Cs in one call that releases the GIL. In Python (replay/records.py) each frame costs
 * three os.pread calls, two crc32c calls and their objects, all under the GIL, so a batch's
 * read could not run beside the rest of a tf.data pipeline. This module does only that loop;
 * every check's wording, and every error, stays in Python: on any failure read_frames returns
 * the failing frame's index and records.py reads the batch again by its own checks.
 *
 * CRC-32C (Castagnoli) with the SSE 4.2 crc32 instruction, three streams interleaved and
 * combined with zero-shift tables (Mark Adler's crc32c.c, zlib licence, public domain
 * structure); the module offers nothing (available() is False) on a CPU without SSE 4.2, and
 * records.py keeps its Python path there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86 1
#include <nmmintrin.h>
#else
#define HAVE_X86 0
#endif

#define POLY 0x82f63b78u     /* CRC-32C, reflected */
#define MASK_DELTA 0xa282ead8u /* tensorflow/core/lib/hash/crc32c.h */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256
#define HEAD_BYTES 12 /* length (8) and its masked CRC (4) */
#define FOOT_BYTES 4  /* the data's masked CRC */

static uint32_t crc_long[4][256];
static uint32_t crc_short[4][256];
static int have_sse42 = 0;

static uint32_t gf2_matrix_times(const uint32_t *mat, uint32_t vec) {
  uint32_t sum = 0;
  while (vec) {
    if (vec & 1) sum ^= *mat;
    vec >>= 1;
    mat++;
  }
  return sum;
}

static void gf2_matrix_square(uint32_t *square, const uint32_t *mat) {
  for (int n = 0; n < 32; n++) square[n] = gf2_matrix_times(mat, mat[n]);
}

/* The operator (a 32x32 bit matrix) that appends `len` zero bytes to a CRC. */
static void zeros_op(uint32_t *even, size_t len) {
  uint32_t odd[32];
  uint32_t row = 1;
  odd[0] = POLY;
  for (int n = 1; n < 32; n++) {
    odd[n] = row;
    row <<= 1;
  }
  gf2_matrix_square(even, odd); /* 2 zero bits */
  gf2_matrix_square(odd, even); /* 4 zero bits */
  do {                          /* len zero bytes: len * 8 bits */
    gf2_matrix_square(even, odd);
    len >>= 1;
    if (len == 0) return;
    gf2_matrix_square(odd, even);
    len >>= 1;
  } while (len);
  for (int n = 0; n < 32; n++) even[n] = odd[n];
}

static void zeros_table(uint32_t zeros[][256], size_t len) {
  uint32_t op[32];
  zeros_op(op, len);
  for (uint32_t n = 0; n < 256; n++) {
    zeros[0][n] = gf2_matrix_times(op, n);
    zeros[1][n] = gf2_matrix_times(op, n << 8);
    zeros[2][n] = gf2_matrix_times(op, n << 16);
    zeros[3][n] = gf2_matrix_times(op, n << 24);
  }
}

static uint32_t shift(uint32_t zeros[][256], uint32_t crc) {
  return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
         zeros[3][crc >> 24];
}

#if HAVE_X86
__attribute__((target("sse4.2"))) static uint32_t crc32c(const unsigned char *next, size_t len) {
  uint64_t crc0 = 0xffffffffu, crc1, crc2;
  uint64_t word;
  while (len && ((uintptr_t)next & 7)) {
    crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
    len--;
  }
  while (len >= LONG_BLOCK * 3) {
    crc1 = crc2 = 0;
    const unsigned char *end = next + LONG_BLOCK;
    do {
      memcpy(&word, next, 8);
      crc0 = _mm_crc32_u64(crc0, word);
      memcpy(&word, next + LONG_BLOCK, 8);
      crc1 = _mm_crc32_u64(crc1, word);
      memcpy(&word, next + 2 * LONG_BLOCK, 8);
      crc2 = _mm_crc32_u64(crc2, word);
      next += 8;
    } while (next < end);
    crc0 = shift(crc_long, (uint32_t)crc0) ^ crc1;
    crc0 = shift(crc_long, (uint32_t)crc0) ^ crc2;
    next += 2 * LONG_BLOCK;
    len -= 3 * LONG_BLOCK;
  }
  while (len >= SHORT_BLOCK * 3) {
    crc1 = crc2 = 0;
    const unsigned char *end = next + SHORT_BLOCK;
    do {
      memcpy(&word, next, 8);
      crc0 = _mm_crc32_u64(crc0, word);
      memcpy(&word, next + SHORT_BLOCK, 8);
      crc1 = _mm_crc32_u64(crc1, word);
      memcpy(&word, next + 2 * SHORT_BLOCK, 8);
      crc2 = _mm_crc32_u64(crc2, word);
      next += 8;
    } while (next < end);
    crc0 = shift(crc_short, (uint32_t)crc0) ^ crc1;
    crc0 = shift(crc_short, (uint32_t)crc0) ^ crc2;
    next += 2 * SHORT_BLOCK;
    len -= 3 * SHORT_BLOCK;
  }
  while (len >= 8) {
    memcpy(&word, next, 8);
    crc0 = _mm_crc32_u64(crc0, word);
    next += 8;
    len -= 8;
  }
  while (len) {
    crc0 = _mm_crc32_u8((uint32_t)crc0, *next++);
    len--;
  }
  return (uint32_t)crc0 ^ 0xffffffffu;
}
#else
static uint32_t crc32c(const unsigned char *next, size_t len) {
  (void)next;
  (void)len;
  return 0; /* unreachable: available() is False without SSE 4.2 */
}
#endif

static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + MASK_DELTA; }

static uint64_t load_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static uint32_t load_u32(const unsigned char *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Frame i: [start, end) of the shard; its data into out. 0, or 1 on any failure (a short or
 * failed read, a length CRC, length or data CRC mismatch). */
static int read_frame(int fd, int64_t start, int64_t end, char *out) {
  unsigned char head[HEAD_BYTES], foot[FOOT_BYTES];
  size_t size = (size_t)(end - start - HEAD_BYTES - FOOT_BYTES);
  struct iovec iov[3] = {{head, HEAD_BYTES}, {out, size}, {foot, FOOT_BYTES}};
  size_t want = (size_t)(end - start), got = 0;
  int at = 0;
  while (got < want) { /* a preadv may return short: continue where it stopped */
    ssize_t n = preadv(fd, iov + at, 3 - at, (off_t)(start + (int64_t)got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 1;
    got += (size_t)n;
    size_t left = (size_t)n;
    while (at < 3 && left >= iov[at].iov_len) {
      left -= iov[at].iov_len;
      at++;
    }
    if (at < 3) {
      iov[at].iov_base = (char *)iov[at].iov_base + left;
      iov[at].iov_len -= left;
    }
  }
  if (masked(crc32c(head, 8)) != load_u32(head + 8)) return 1;
  if (load_u64(head) != (uint64_t)size) return 1;
  if (masked(crc32c((const unsigned char *)out, size)) != load_u32(foot)) return 1;
  return 0;
}

PyDoc_STRVAR(read_frames_doc,
             "read_frames(fd, starts, ends) -> (records, failed)\n\n"
             "The data of the frames [starts[i], ends[i]) of the open file fd (int64 buffers),\n"
             "each checked as TensorFlow's reader checks it, read with the GIL released.\n"
             "records is a list of bytes; failed is -1, or the index of the first frame that\n"
             "could not be read or failed a check (records is then None).");

static PyObject *read_frames(PyObject *self, PyObject *args) {
  int fd;
  Py_buffer starts, ends;
  (void)self;
  if (!PyArg_ParseTuple(args, "iy*y*", &fd, &starts, &ends)) return NULL;
  PyObject *result = NULL, *records = NULL;
  Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
  if (ends.len != starts.len || starts.len % (Py_ssize_t)sizeof(int64_t)) {
    PyErr_SetString(PyExc_ValueError, "read_frames: starts and ends must be int64 of one length");
    goto done;
  }
  const int64_t *s = (const int64_t *)starts.buf, *e = (const int64_t *)ends.buf;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (e[i] - s[i] < HEAD_BYTES + FOOT_BYTES || s[i] < 0) {
      PyErr_Format(PyExc_ValueError, "read_frames: frame %zd is not a frame", i);
      goto done;
    }
  }
  records = PyList_New(n);
  if (records == NULL) goto done;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *data = PyBytes_FromStringAndSize(NULL, e[i] - s[i] - HEAD_BYTES - FOOT_BYTES);
    if (data == NULL) goto done;
    PyList_SET_ITEM(records, i, data);
  }
  Py_ssize_t failed = -1;
  Py_BEGIN_ALLOW_THREADS;  /* the bytes are new and seen by no other thread yet */
  for (Py_ssize_t i = 0; i < n; i++) {
    if (read_frame(fd, s[i], e[i], PyBytes_AS_STRING(PyList_GET_ITEM(records, i)))) {
      failed = i;
      break;
    }
  }
  Py_END_ALLOW_THREADS;
  if (failed >= 0) {
    result = Py_BuildValue("(On)", Py_None, failed);
  } else {
    result = Py_BuildValue("(On)", records, (Py_ssize_t)-1);
  }
done:
  Py_XDECREF(records);
  PyBuffer_Release(&starts);
  PyBuffer_Release(&ends);
  return result;
}

PyDoc_STRVAR(masked_crc32c_doc, "masked_crc32c(data) -> int: TFRecord's masked CRC-32C of data.");

static PyObject *py_masked_crc32c(PyObject *self, PyObject *args) {
  Py_buffer data;
  (void)self;
  if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
  uint32_t crc;
  Py_BEGIN_ALLOW_THREADS;
  crc = masked(crc32c((const unsigned char *)data.buf, (size_t)data.len));
  Py_END_ALLOW_THREADS;
  PyBuffer_Release(&data);
  return PyLong_FromUnsignedLong(crc);
}

static PyObject *available(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyBool_FromLong(have_sse42);
}

static PyMethodDef methods[] = {
    {"read_frames", read_frames, METH_VARARGS, read_frames_doc},
    {"masked_crc32c", py_masked_crc32c, METH_VARARGS, masked_crc32c_doc},
    {"available", available, METH_NOARGS, "True where the CPU has the CRC-32C instruction."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "replay._frames",
                                    "TFRecord frames read and checked outside the GIL.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__frames(void) {
#if HAVE_X86
  __builtin_cpu_init();
  have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
  zeros_table(crc_long, LONG_BLOCK);
  zeros_table(crc_short, SHORT_BLOCK);
  return PyModule_Create(&module);
}
