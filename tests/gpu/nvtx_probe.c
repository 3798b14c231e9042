/* A minimal NVTX injection library for the tests: loaded by NVTX when NVTX_INJECTION64_PATH names
 * it, it appends one line per pushed or started range ("push <name>" / "start <name>") to the file
 * named by SLUICE_NVTX_PROBE_OUT, so a test can check which ranges a run emitted without Nsight. */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static FILE* g_out = NULL;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void record(const char* kind, const char* name) {
  if (!g_out || !name) return;
  pthread_mutex_lock(&g_lock);
  fprintf(g_out, "%s %s\n", kind, name);
  fflush(g_out);
  pthread_mutex_unlock(&g_lock);
}

static const char* message_of(const nvtxEventAttributes_t* a) {
  return a && a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : NULL;
}

static int NVTX_API push_ex(const nvtxEventAttributes_t* a) { record("push", message_of(a)); return 0; }
static int NVTX_API push_a(const char* m) { record("push", m); return 0; }
static int NVTX_API pop(void) { return 0; }
static nvtxRangeId_t NVTX_API start_ex(const nvtxEventAttributes_t* a) { record("start", message_of(a)); return 1; }
static nvtxRangeId_t NVTX_API start_a(const char* m) { record("start", m); return 1; }
static void NVTX_API end(nvtxRangeId_t id) { (void)id; }

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const char* path = getenv("SLUICE_NVTX_PROBE_OUT");
  if (!path) return 0;
  g_out = fopen(path, "a");
  if (!g_out) return 0;
  const NvtxExportTableCallbacks* cb = (const NvtxExportTableCallbacks*)get_table(NVTX_ETID_CALLBACKS);
  if (!cb) return 0;
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || !table) return 0;
  if (size > NVTX_CBID_CORE_RangePushEx) *table[NVTX_CBID_CORE_RangePushEx] = (NvtxFunctionPointer)push_ex;
  if (size > NVTX_CBID_CORE_RangePushA) *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push_a;
  if (size > NVTX_CBID_CORE_RangePop) *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
  if (size > NVTX_CBID_CORE_RangeStartEx) *table[NVTX_CBID_CORE_RangeStartEx] = (NvtxFunctionPointer)start_ex;
  if (size > NVTX_CBID_CORE_RangeStartA) *table[NVTX_CBID_CORE_RangeStartA] = (NvtxFunctionPointer)start_a;
  if (size > NVTX_CBID_CORE_RangeEnd) *table[NVTX_CBID_CORE_RangeEnd] = (NvtxFunctionPointer)end;
  return 1;
}
