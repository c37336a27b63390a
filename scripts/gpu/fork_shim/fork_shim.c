/* The probe's pass-through of the CUDA runtime (make.sh says what it is for). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern const int vt_shim_count;
extern const char* const vt_shim_names[];

static void* g_real[1024];
static unsigned char g_logged[1024];
static volatile int g_child = 0;
static int g_device = 0;
static int g_device_count = 1;
static int g_log_fd = 2;

static int child_get_device(int* device) {
  *device = g_device;
  return 0;
}
static int child_set_device(int device) { return device == g_device ? 0 : 101; }
static int child_get_device_count(int* count) {
  *count = g_device_count;
  return 0;
}

/* Called by the forked child before its first CUDA call. */
void vt_shim_child(int device, int device_count, int log_fd) {
  g_device = device;
  g_device_count = device_count;
  g_log_fd = log_fd;
  memset(g_logged, 0, sizeof g_logged);
  g_child = 1;
}

static void* runtime(void) {
  static void* h;
  if (!h) h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libcudart.so.12", RTLD_NOW | RTLD_NOLOAD);
  return h ? h : RTLD_NEXT;
}

void* vt_shim_enter(int index) {
  const char* name = vt_shim_names[index];
  if (g_child) {
    if (!g_logged[index]) {
      g_logged[index] = 1;
      char line[160];
      int n = snprintf(line, sizeof line, "cuda-call %s\n", name);
      if (write(g_log_fd, line, n) < 0) {}
    }
    if (!strcmp(name, "cudaGetDevice")) return (void*)child_get_device;
    if (!strcmp(name, "cudaSetDevice")) return (void*)child_set_device;
    if (!strcmp(name, "cudaGetDeviceCount")) return (void*)child_get_device_count;
  }
  void* f = g_real[index];
  if (!f) {
    f = dlsym(runtime(), name);
    g_real[index] = f;
  }
  return f;
}
