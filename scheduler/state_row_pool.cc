#include "scheduler/state_row_pool.h"

#include <algorithm>
#include <functional>

#include "common/logging.h"

namespace coil {

StateRowPool::StateRowPool(int32_t num_rows) : in_use_(std::max(num_rows, 0), false) {
  free_slots_.reserve(in_use_.size());
  for (int32_t slot = num_total() - 1; slot >= 0; --slot) free_slots_.push_back(slot);
}

std::optional<StateRow> StateRowPool::Allocate() {
  if (free_slots_.empty()) return std::nullopt;
  // Keep the stack sorted (highest at the bottom) so that the lowest slot is always on top.
  const int32_t slot = free_slots_.back();
  free_slots_.pop_back();
  in_use_[slot] = true;
  return StateRow(slot);
}

void StateRowPool::Free(StateRow* row) {
  COIL_CHECK(row->held()) << "freeing a state row that holds nothing";
  const int32_t slot = row->slot_;
  COIL_CHECK(slot < num_total() && in_use_[slot]) << "state row " << slot << " freed twice";
  in_use_[slot] = false;
  // Insert keeping descending order; pools are small (hundreds of rows).
  auto position =
      std::lower_bound(free_slots_.begin(), free_slots_.end(), slot, std::greater<int32_t>());
  free_slots_.insert(position, slot);
  row->slot_ = -1;
}

}  // namespace coil
