#include "tenax/core/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace tenax {
namespace {

// FIPS 180-4's examples, and lengths around the padding's edges (55, 56 and 64 bytes: one block,
// two blocks, a whole block) and several blocks, against Python's hashlib.
TEST(Sha256, MatchesTheStandardsVectorsAndHashlib) {
  EXPECT_EQ(HexOf(Sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(HexOf(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HexOf(Sha256(std::string(55, 'x'))),
            "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  EXPECT_EQ(HexOf(Sha256(std::string(56, 'x'))),
            "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  EXPECT_EQ(HexOf(Sha256(std::string(64, 'x'))),
            "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
  EXPECT_EQ(HexOf(Sha256(std::string(1000, 'a'))),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

// RFC 4231's test cases 2 (a short key) and 6 (a key longer than the block), and a long message
// against Python's hmac.
TEST(HmacSha256, MatchesRfc4231AndPythonsHmac) {
  EXPECT_EQ(HexOf(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(HexOf(HmacSha256(std::string(131, '\xaa'),
                             "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  std::string message;
  for (int i = 0; i < 4; ++i) message += "message of 70 bytes";
  EXPECT_EQ(HexOf(HmacSha256(std::string(100, 'k'), message)),
            "653388523b0ac5556e5e9920d7d41c9a1512e2449d62ff67479b843ee448156c");
  EXPECT_TRUE(DigestsEqual(HmacSha256("a", "m"), HmacSha256("a", "m")));
  EXPECT_FALSE(DigestsEqual(HmacSha256("a", "m"), HmacSha256("b", "m")));
}

}  // namespace
}  // namespace tenax
