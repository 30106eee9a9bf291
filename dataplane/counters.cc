#include "dataplane/counters.h"

namespace aggswitch::dataplane {

const char* DropReasonLabel(DropReason reason) {
  switch (reason) {
#define AGG_DROP_LABEL(name, label, help) \
  case DropReason::name: return label;
    AGG_DROP_REASONS(AGG_DROP_LABEL)
#undef AGG_DROP_LABEL
    case DropReason::kCount: break;
  }
  return "unknown";
}

const char* DropReasonHelp(DropReason reason) {
  switch (reason) {
#define AGG_DROP_HELP(name, label, help) \
  case DropReason::name: return help;
    AGG_DROP_REASONS(AGG_DROP_HELP)
#undef AGG_DROP_HELP
    case DropReason::kCount: break;
  }
  return "unknown";
}

}  // namespace aggswitch::dataplane
