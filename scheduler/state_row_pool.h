// The pool of recurrent-state rows: one row per running request for its whole life, never
// shared. The scheduler owns the rows as numbers; the workers own the memory, sized from
// the same count. Invariant: a slot is either free or held by exactly one StateRow.
#ifndef COIL_SCHEDULER_STATE_ROW_POOL_H_
#define COIL_SCHEDULER_STATE_ROW_POOL_H_

#include <cstdint>
#include <optional>
#include <vector>

namespace coil {

// A held row. Only the pool makes one; a default-constructed row holds nothing.
class StateRow {
 public:
  StateRow() = default;
  bool held() const { return slot_ >= 0; }
  int32_t slot() const { return slot_; }

 private:
  friend class StateRowPool;
  explicit StateRow(int32_t slot) : slot_(slot) {}
  int32_t slot_ = -1;
};

class StateRowPool {
 public:
  explicit StateRowPool(int32_t num_rows);

  // The lowest free slot, or nothing when every row is held. Lowest first keeps the slots
  // a step touches dense and the order deterministic.
  std::optional<StateRow> Allocate();
  // Returns the row to the pool and leaves *row holding nothing. Freeing a row twice is
  // a bug in the caller and aborts.
  void Free(StateRow* row);

  int32_t num_total() const { return static_cast<int32_t>(in_use_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_slots_.size()); }
  int32_t num_used() const { return num_total() - num_free(); }

 private:
  std::vector<int32_t> free_slots_;  // a stack with the lowest slot on top
  std::vector<bool> in_use_;
};

}  // namespace coil

#endif  // COIL_SCHEDULER_STATE_ROW_POOL_H_
