// tests/cpp/expect_error.hpp - expect_error(call, needle): `call` must throw
// spattn::Error whose message contains `needle` (the tests of messages that
// name a parameter and its value).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "spattn/error.hpp"

namespace spattn::testing {

template <typename Call>
void expect_error(Call&& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace spattn::testing
