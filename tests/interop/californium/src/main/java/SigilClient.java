// A coaps:// client on Eclipse Californium/Scandium 3.x for the interop tests: one GET with a
// pre-shared key or a raw public key, printing the response code and the payload in hex.
//
//   java SigilClient psk <uri> <identity> <key-hex>
//   java SigilClient ecdhe-psk <uri> <identity> <key-hex>
//   java SigilClient rpk-gcm <uri> <pkcs8-private-key.der> <spki-public-key.der>
// An optional fifth argument cid=N asks for RFC 9146 connection IDs.
//   java SigilClient rpk <uri> <pkcs8-private-key.der> <spki-public-key.der>

import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.spec.PKCS8EncodedKeySpec;
import java.security.spec.X509EncodedKeySpec;
import java.util.HexFormat;
import java.util.List;

import org.eclipse.californium.core.CoapClient;
import org.eclipse.californium.core.CoapResponse;
import org.eclipse.californium.core.config.CoapConfig;
import org.eclipse.californium.core.network.CoapEndpoint;
import org.eclipse.californium.elements.config.Configuration;
import org.eclipse.californium.scandium.DTLSConnector;
import org.eclipse.californium.scandium.config.DtlsConfig;
import org.eclipse.californium.scandium.config.DtlsConnectorConfig;
import org.eclipse.californium.scandium.dtls.cipher.CipherSuite;
import org.eclipse.californium.scandium.dtls.pskstore.AdvancedSinglePskStore;
import org.eclipse.californium.scandium.dtls.x509.SingleCertificateProvider;
import org.eclipse.californium.scandium.dtls.x509.StaticNewAdvancedCertificateVerifier;

public class SigilClient {
    static {
        CoapConfig.register();
        DtlsConfig.register();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4 && args.length != 5) {
            System.err.println("usage: psk|ecdhe-psk <uri> <identity> <key-hex> | rpk|rpk-gcm <uri> <pkcs8.der> <spki.der>");
            System.exit(64);
        }
        Configuration config = Configuration.createStandardWithoutFile();
        config.set(DtlsConfig.DTLS_ROLE, DtlsConfig.DtlsRole.CLIENT_ONLY);
        config.set(CoapConfig.MAX_RESOURCE_BODY_SIZE, 65536);
        if (args.length == 5 && args[4].startsWith("cid=")) {
            // RFC 9146 connection ID of this length for records to us (0: use the server's only).
            config.set(DtlsConfig.DTLS_CONNECTION_ID_LENGTH, Integer.parseInt(args[4].substring(4)));
        }
        DtlsConnectorConfig.Builder b;
        if (args[0].equals("psk") || args[0].equals("ecdhe-psk")) {
            config.set(DtlsConfig.DTLS_CIPHER_SUITES, List.of(args[0].equals("psk")
                    ? CipherSuite.TLS_PSK_WITH_AES_128_CCM_8
                    : CipherSuite.TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256));
            b = DtlsConnectorConfig.builder(config);
            b.setAdvancedPskStore(new AdvancedSinglePskStore(args[2], HexFormat.of().parseHex(args[3])));
        } else {
            config.set(DtlsConfig.DTLS_CIPHER_SUITES, List.of(args[0].equals("rpk-gcm")
                    ? CipherSuite.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
                    : CipherSuite.TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8));
            b = DtlsConnectorConfig.builder(config);
            KeyFactory kf = KeyFactory.getInstance("EC");
            PrivateKey priv = kf.generatePrivate(new PKCS8EncodedKeySpec(Files.readAllBytes(Path.of(args[2]))));
            PublicKey pub = kf.generatePublic(new X509EncodedKeySpec(Files.readAllBytes(Path.of(args[3]))));
            b.setCertificateIdentityProvider(new SingleCertificateProvider(priv, pub));
            // The server is what is under test; its key is checked by the other suites.
            b.setAdvancedCertificateVerifier(StaticNewAdvancedCertificateVerifier.builder().setTrustAllRPKs().build());
        }
        DTLSConnector connector = new DTLSConnector(b.build());
        CoapEndpoint endpoint = new CoapEndpoint.Builder().setConfiguration(config).setConnector(connector).build();
        CoapClient client = new CoapClient(args[1]);
        client.setEndpoint(endpoint);
        client.setTimeout(10_000L);
        CoapResponse r = client.get();
        int rc = 2;
        if (r == null) {
            System.out.println("NO RESPONSE");
        } else {
            System.out.println("CODE " + r.getCode().text);
            System.out.println(HexFormat.of().formatHex(r.getPayload()));
            rc = r.isSuccess() ? 0 : 1;
        }
        client.shutdown();
        endpoint.destroy();
        System.exit(rc);
    }
}
