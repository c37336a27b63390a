// Catch2 main for the e2e tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
