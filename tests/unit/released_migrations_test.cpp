// Released migrations never change: a database migrated by an earlier release verifies its history
// (version, checksum) against the files this build embeds, so a changed byte in a released file, or a
// set that reuses another set's file that is not byte-identical (cmake/EmbedMigrations.cmake), would
// make every such database refuse to start. The checksums below are those of the files as released
// (SHA-256, the value written to <prefix>schema_migrations); a new migration adds its line when it ships.
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "base/embedded_migrations.hpp"

namespace {

struct Released {
  std::string_view dialect;
  int version;
  std::string_view checksum;
};

const std::vector<Released> kReleased{
    {"postgres", 1, "bf9269cc9211222e1d943a1c36aae70b7d51832404a84ce403ce78fdfa5cb7f7"},
    {"postgres", 2, "31825eed13b889c90143a96ccf530fe6cf888944e77bbf6642e3ca9084b6801d"},
    {"postgres", 3, "1c2798b7221c85201d5d6211f4d4bfde06d07a60077593f650931b3138779d30"},
    {"postgres", 4, "7d95e0553ce38fb3c054ddb27b2f6978f5bd63ba9ebcb6ab65549ee4fdd9e1fb"},
    {"postgres", 5, "8b996a9766c7fd53b0dd306bff3b0d474db8cd619ecbc54f335adfff3b6f28f8"},
    {"postgres", 6, "c4f764dcf976385d446641c58dae80f1fa2ac940a07391c7f67e831960ce6384"},
    {"postgres", 7, "5d7c2f9da9b956ea38cb1609ff4bf93aab379265bd3bc67922c8f893fb0c5a20"},
    {"postgres", 8, "9261f2c972b0d1e9428cb45ee6ba2f781498912ffa8867237e296c87ec22423b"},
    {"postgres", 9, "0a6f0033014adb196c6825a2efc1d26cdca31c755e4eb80d985719ce90f78051"},
    {"postgres", 10, "599165c91111209d227c1a1f1699ce0345f5c411d285538f21e013b63c88ba06"},
    {"postgres", 11, "d3adbfe274a50b2781bb0c4d1d10b3a446141d5fdac95f554c592db1033dcc89"},
    {"postgres", 12, "8253d9394a7381b6dadc9356305d0eb5ab20e2dc6306b6bb158edd4fded03581"},
    {"postgres", 13, "bd37200b18bc427954c41eac46493ce11295ad9dae1e32454e8e49dd8ff3d8e8"},
    {"postgres", 14, "3a1709217f44291ec24eb5571cd97acae917a2bd29c6b91c6849a1658cbbbca0"},
    {"postgres", 15, "8fbf1eb6973e1888933aacf1ed47783bf97fff0bf43a95ff093b7b826121f426"},
    {"postgres", 16, "7dd904f93e914df3b777da32a7a879d119c61ed135ebba30bbd5a98f3981f754"},
    {"postgres", 17, "7f5ddcccc8fbb940d954d42c148e96c16e69fd1de14d74b0651e74ed2a717235"},
    {"postgres", 18, "2150bb36de54a3c771a3ee1a10bbdcf921a74c80754e10176d4a4d49a37e26ab"},
    {"postgres", 19, "ef2befe9ce53865fc7300fa437495de8581ef6d5f61cf22b338992c67c6a229f"},
    {"postgres", 20, "e299094632a05c9419d428adcb2098c03e180ebb72950f8640845664e4b85fde"},
    {"mysql", 1, "d794f1ff94ece38147b146f7b42cd66eccf9df6643fb986f738420986c11b7d7"},
    {"mysql", 2, "45ae38f5f0ec1cac474b2f0940339442edf51582fb9abd082c559cafb581a06f"},
    {"mysql", 3, "51026c8acd9f6e07732feafc15ee6649dd534c9b36564e6a7e1f28a1538243e8"},
    {"mysql", 17, "01668803960b2ed717332ac82141b7d90b143736930f3b5f5d1bffdd12adac14"},
    {"mysql", 18, "dde6f89aa7f50305d8092827c395b16201b024b3e155fbaa744cc631a91f727d"},
    {"mysql", 19, "9014577c56cebddd7e5417d5dd2e90397249c38e3cceb1466928ef0f51c41d3f"},
    {"mysql", 20, "65682f2d7a7234567d4dfd74f1b4ea4a07b88ef61641e3f87f05ed61599e3cd6"},
    {"mysql", 4, "801c40ff47df36b5e429023f26aa6ea394d3d0ec1f40e01d6bd682defcacb6f9"},
    {"mysql", 5, "e7560dfc3501866f3294458a62dcdbf2a9c02991d6144e2c48ecf5cd3cd05e5b"},
    {"mysql", 6, "d916510e72d35c953c3d095ac1a83f9f748873fcc21e563fe7418c70830131d3"},
    {"mysql", 7, "ec12756b947f3fe48dc5d83d575c07a8a1abcf2a8e315ec9a96e4ee7c843caa5"},
    {"mysql", 8, "69f5458080ba82dbb25e23b76be857b4c19453fcf0235eeebd47fbdd72c6e91e"},
    {"mysql", 9, "ab91e2170e85cd6614304cf10040a03dafa8492c4e1051a828fb8bd0f00f864a"},
    {"mysql", 10, "5846dcbaf55bd0d082c59d5098fa6de67f726eb62f2728b00e09ab28d9220cbf"},
    {"mysql", 11, "810670f47eb78c0e62fc07331155d2e3858299dcbc344e2b05e409ff9cf1c527"},
    {"mysql", 12, "25e496a30d028ce8c6f2fb6ea9868ff61128624d6db0dd2e795517136adc39e7"},
    {"mysql", 13, "c817ad6961dbf44e6d3571f21ff43c1f6520816320d6dbcc243c216cb8598b26"},
    {"mysql", 14, "2d54e2162ba36c8472019a900baf86366adb32333257d0aade682325b0b54ce4"},
    {"mysql", 15, "6f4f04e489b92c49050f2764ee0a4856eed088da3685b5631cf05952e560e98c"},
    {"mysql", 16, "6cb5545a7ef9e5f754d70f5e11c2dbf7ab918bb35987962463415dd0aabcd173"},
    {"galera", 1, "4353166034a867c4cee5a24df2091c0e4815bcdadffef017f9375b74fb97a158"},
    {"galera", 2, "7f62a03a205b2aa2d11f34690529d1c93da21235a8abb66bce2aee69888c40f5"},
    {"galera", 3, "d93cb40cb948293b8f249f397e9b1b1f90aa640034bc3664529079b0ae81a9c1"},
    {"galera", 4, "6ddd72ea85b8d84128fcf5e889a227ec0475a1a06785989867374df935ff265f"},
    {"galera", 5, "e7560dfc3501866f3294458a62dcdbf2a9c02991d6144e2c48ecf5cd3cd05e5b"},
    {"galera", 6, "ef0dacae006b5a33074371ddf33cd0a435d63f526f59dcdb3c1fae067ffeeed6"},
    {"galera", 7, "155df498209deaddfaab0efa0496ec0e1ff5d935c3a4aad7e4a0f5d62a0adc70"},
    {"galera", 8, "5715478a05c8036805a0567c106967e10c099be2504bcbcb72583ab3d6e501b4"},
    {"galera", 9, "e051a245c429ec7c7f0e8046d768d5fe0ce76e3806f136edccd266c8babd0ac6"},
    {"galera", 10, "047213dfa54d8e7669d71b48b131ae163147441feeda38c90a0d0e9010c91022"},
    {"galera", 11, "810670f47eb78c0e62fc07331155d2e3858299dcbc344e2b05e409ff9cf1c527"},
    {"galera", 12, "25e496a30d028ce8c6f2fb6ea9868ff61128624d6db0dd2e795517136adc39e7"},
    {"galera", 13, "c817ad6961dbf44e6d3571f21ff43c1f6520816320d6dbcc243c216cb8598b26"},
    {"galera", 14, "2d54e2162ba36c8472019a900baf86366adb32333257d0aade682325b0b54ce4"},
    {"galera", 15, "a940c35bf44d1fec9fb818267442b2b8ae66471acf8faac17c11630ad2d3f9dd"},
    {"galera", 16, "6cb5545a7ef9e5f754d70f5e11c2dbf7ab918bb35987962463415dd0aabcd173"},
    {"galera", 17, "01668803960b2ed717332ac82141b7d90b143736930f3b5f5d1bffdd12adac14"},
    {"galera", 18, "dde6f89aa7f50305d8092827c395b16201b024b3e155fbaa744cc631a91f727d"},
    {"galera", 19, "9014577c56cebddd7e5417d5dd2e90397249c38e3cceb1466928ef0f51c41d3f"},
    {"galera", 20, "65682f2d7a7234567d4dfd74f1b4ea4a07b88ef61641e3f87f05ed61599e3cd6"},
    {"sqlite", 1, "ede1c9483360a3fdb8bb5c3be98b301f2f1ac996d52d54e28a59d63e78a7454d"},
    {"sqlite", 2, "81d1617858417603b3afab5e699b73d27c61fd0187487ecb9781a1aec6ceeff9"},
    {"sqlite", 3, "2a8169be75068d03a7ec690f160c34aa65bd41701b24cc551c7f85265da38938"},
    {"sqlite", 4, "70133acb08cfe386f80325f195a0e20129ce3c5dfe5606b4237802c95353b45d"},
    {"sqlite", 5, "e7560dfc3501866f3294458a62dcdbf2a9c02991d6144e2c48ecf5cd3cd05e5b"},
    {"sqlite", 6, "39072a0c8c8f2c45c4dcd5a94c7ae6355db1d09b3a0146ca1279f982c89b0d3e"},
    {"sqlite", 7, "103a05e83ecb140100d0debff559802f2aeba0f5361b8495094431a7eafd4cfe"},
    {"sqlite", 8, "0d45a32b232986c1c51fba80a9e75768f481ee43706e2b2fad60c830bad824be"},
    {"sqlite", 9, "b15d96d918dbc21790c7649753ccce1549712f02dce605f12bc59300739b3b0e"},
    {"sqlite", 10, "afea1578cec01afef11e516ed613e879874d4207a12a9b21045ff6dbe847cfc0"},
    {"sqlite", 11, "45541b336c026e5882952ad3f66f927e6392f684ffed7ea9631fc4e3ebaf118f"},
    {"sqlite", 12, "05e0f62734921de621ca35980d0326348b68e1d43d33640fe8860e38cded07e9"},
    {"sqlite", 13, "ef8770054f2679bbcb770867931ccc0667a0017abeed284356f5e5131e08ff8e"},
    {"sqlite", 14, "8d1496489a077c0c386ff9c055578dd586bc16f18200f95a5fee112c278102d6"},
    {"sqlite", 15, "2342d54b1e57521614799196b89ddfff73d209c135c1bcd0390ed7b2bb6c37c5"},
    {"sqlite", 16, "0ef0bce6fd6634bd551c86443a5d6267dbc7fa4fa2218207145e2c618e9422ef"},
    {"sqlite", 17, "975d4cd51707f9d120ff2d21ddcfedfe15af48d3a392493beab60cbcac7e8103"},
    {"sqlite", 18, "67495ac2339e696d28b10c88e885a7a4acdfd3ddd1a9119f33a85a937a9ab089"},
    {"sqlite", 19, "e5c7c61091080c1f1067d213dbef5c7a1d4fa8e19c9a69e3fb91c72fc6211188"},
    {"sqlite", 20, "5cf04fecd33e8e557539c21f8d2845be2246382e0c64b118b54c4c426da02322"},
};

TEST(ReleasedMigrations, EveryReleasedFileIsEmbeddedWithItsReleasedChecksum) {
  for (const auto& released : kReleased) {
    const dblock::detail::EmbeddedMigration* found = nullptr;
    for (const auto& embedded : dblock::detail::embedded_migrations())
      if (embedded.dialect == released.dialect && embedded.file.version == released.version) found = &embedded;
    ASSERT_NE(found, nullptr) << released.dialect << " migration " << released.version << " is no longer embedded";
    EXPECT_EQ(found->file.checksum, released.checksum)
        << released.dialect << " migration " << released.version << " (" << found->file.name
        << ") changed after its release: databases migrated with it would refuse the new build";
  }
}

}  // namespace
