#include "platform/configuration_store.h"

#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace farm {

absl::Status CheckConfigurationSize(const std::string& data) {
  if (data.size() <= kMaxConfigurationBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("a configuration of ", data.size(),
                                                 " bytes is over the store's limit of ",
                                                 kMaxConfigurationBytes, " bytes"));
}

absl::Status CheckExpectedVersion(int64_t expected_version) {
  if (expected_version >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("expected version ", expected_version,
                                                 " is not a version (versions start at 0)"));
}

absl::Status NoConfigurationRecord(const std::string& where) {
  return absl::NotFoundError(absl::StrCat("no configuration record at ", where, " yet"));
}

absl::Status ConfigurationRecordExists(const std::string& where, int64_t version) {
  return absl::AlreadyExistsError(absl::StrCat("a configuration record exists already at ", where,
                                               " (version ", version, "): Read it"));
}

absl::Status AnotherConfigurationWon(const std::string& where, int64_t version,
                                     int64_t expected_version) {
  return absl::FailedPreconditionError(absl::StrCat("another configuration won: ", where,
                                                    " is at version ", version, ", not ",
                                                    expected_version, " (Read it)"));
}

class InMemoryConfigurationRecord {
 public:
  std::mutex mu;
  std::optional<VersionedRecord> record;  // guarded by mu
};

std::shared_ptr<InMemoryConfigurationRecord> NewInMemoryConfigurationRecord() {
  return std::make_shared<InMemoryConfigurationRecord>();
}

namespace {

class InMemoryConfigurationStore : public ConfigurationStore {
 public:
  explicit InMemoryConfigurationStore(InMemoryStoreOptions options) : options_(std::move(options)) {
    if (options_.record == nullptr) options_.record = NewInMemoryConfigurationRecord();
  }

  absl::StatusOr<VersionedRecord> Read() override {
    return Run<VersionedRecord>("Read", [&]() -> absl::StatusOr<VersionedRecord> {
      if (!record().has_value()) return NoConfigurationRecord(Describe());
      return *record();
    });
  }

  absl::StatusOr<int64_t> Create(const std::string& data) override {
    if (absl::Status s = CheckConfigurationSize(data); !s.ok()) return s;
    return Run<int64_t>("Create", [&]() -> absl::StatusOr<int64_t> {
      if (record().has_value()) return ConfigurationRecordExists(Describe(), record()->version);
      record() = VersionedRecord{data, 0};
      return 0;
    });
  }

  absl::StatusOr<int64_t> CompareAndSet(int64_t expected_version,
                                        const std::string& data) override {
    if (absl::Status s = CheckConfigurationSize(data); !s.ok()) return s;
    if (absl::Status s = CheckExpectedVersion(expected_version); !s.ok()) return s;
    return Run<int64_t>("CompareAndSet", [&]() -> absl::StatusOr<int64_t> {
      if (!record().has_value()) return NoConfigurationRecord(Describe());
      if (record()->version != expected_version) {
        return AnotherConfigurationWon(Describe(), record()->version, expected_version);
      }
      record() = VersionedRecord{data, expected_version + 1};
      return expected_version + 1;
    });
  }

  std::string Describe() const override { return "in-memory store " + options_.name; }

 private:
  std::optional<VersionedRecord>& record() { return options_.record->record; }

  // Runs `call` under the record's lock, between the fault-injection hooks.
  template <typename T, typename Call>
  absl::StatusOr<T> Run(absl::string_view name, Call call) {
    if (options_.fail_before) {
      if (absl::Status s = options_.fail_before(name); !s.ok()) return s;
    }
    absl::StatusOr<T> result;
    {
      std::lock_guard<std::mutex> l(options_.record->mu);
      result = call();
    }
    if (result.ok() && options_.fail_after) {
      if (absl::Status s = options_.fail_after(name); !s.ok()) return s;
    }
    return result;
  }

  InMemoryStoreOptions options_;
};

}  // namespace

std::unique_ptr<ConfigurationStore> NewInMemoryConfigurationStore(InMemoryStoreOptions options) {
  return std::make_unique<InMemoryConfigurationStore>(std::move(options));
}

}  // namespace farm
